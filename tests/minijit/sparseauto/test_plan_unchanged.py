"""The planner's output for a fixed set of expressions is what it was before the planning
speed-ups of issue 38 (memoized costs, cached hashes, no cyclic GC while planning): same
schedules in the same order, same costs, same frontier and same choice.

``CASES`` holds the bench's seven kernels (bench sizes and non-zero counts) and ten
4-operand expressions drawn with ``strategies.expressions(max_operands=4)`` (the slowest
to plan of 312 draws). Their ``expected`` values were printed by the planner at commit
f2a30f8, before the speed-ups: that output is the oracle for "unchanged". The digests are
sha256 (first 16 hex digits) of every stage-1 schedule with its cost, in enumeration order,
and of ``plan.listing(every=True)``.
"""

from __future__ import annotations

import hashlib

import pytest

from minijit.sparseauto.nest import Operand
from minijit.sparseauto.plan import _stages, sparse_plan
from minijit.sparseauto.schedules import renumbered


def _summary(case: dict) -> dict:
    ops = [Operand(n, tuple(i), tuple(lv)) for n, i, lv in case["operands"]]
    plan = sparse_plan(case["subscripts"], *ops, sizes=case["sizes"], nnz=case["nnz"], memory_limit=1e6, lanes=None)
    stage1 = "\n".join(f"{renumbered(c.nest)}\n{c.cost}" for c in plan.stage1)
    return dict(
        schedules=len(plan.space.nests),
        truncated=plan.space.truncated,
        stage1=len(plan.stage1),
        stage2=len(plan.stage2),
        buckets=len(plan.frontier_buckets),
        frontier=[(str(b.time), str(b.memory), len(b.candidates)) for b in plan.smt.kept],
        frontier_costs=sorted({str(c.cost) for c in plan.frontier_candidates()}),
        chosen=str(renumbered(plan.chosen)),
        chosen_cost=str(plan.choice.candidate.cost),
        reason=plan.choice.reason,
        stage1_sha=hashlib.sha256(stage1.encode()).hexdigest()[:16],
        listing_sha=hashlib.sha256(plan.listing(every=True).encode()).hexdigest()[:16],
    )


CASES = [
    {
        "name": "SpMM",
        "subscripts": "ik,kj->ij",
        "operands": [("B", "ik", ("dense", "compressed")), ("C", "kj", ("dense", "dense"))],
        "sizes": {"i": 20000, "k": 20000, "j": 32},
        "nnz": {"B": 400000},
        "expected": {
            "schedules": 1,
            "truncated": False,
            "stage1": 1,
            "stage2": 1,
            "buckets": 1,
            "frontier": [("J*nnz(B_ik)", "0", 1)],
            "frontier_costs": ["time J*nnz(B_ik), memory 0, loop depth 3, memory depth 0"],
            "chosen": "# A(i:d,j:d) = B(i:d,k:c) * C(k:d,j:d)\n"
            "for i:\n"
            "  for k_pos:\n"
            "    for j:\n"
            "      A(i,j) += B(i,k)*C(k,j)",
            "chosen_cost": "time J*nnz(B_ik), memory 0, loop depth 3, memory depth 0",
            "reason": "least time with temporaries <= 1000000 elements",
            "stage1_sha": "1c6d0305333995be",
            "listing_sha": "b80d8a6931802529",
        },
    },
    {
        "name": "SDDMM",
        "subscripts": "ij,ik,jk->ij",
        "operands": [
            ("B", "ij", ("dense", "compressed")),
            ("C", "ik", ("dense", "dense")),
            ("D", "jk", ("dense", "dense")),
        ],
        "sizes": {"i": 20000, "j": 20000, "k": 32},
        "nnz": {"B": 400000},
        "expected": {
            "schedules": 8,
            "truncated": False,
            "stage1": 8,
            "stage2": 4,
            "buckets": 2,
            "frontier": [("K*nnz(B_ij)", "0", 1), ("K*nnz(B_ij)", "1", 1)],
            "frontier_costs": [
                "time K*nnz(B_ij) + nnz(B_ij), memory 1, loop depth 3, memory depth 0",
                "time K*nnz(B_ij), memory 0, loop depth 3, memory depth 0",
            ],
            "chosen": "# A(i:d,j:c) = B(i:d,j:c) * C(i:d,k:d) * D(j:d,k:d)\n"
            "for i:\n"
            "  for j_pos:\n"
            "    for k:\n"
            "      A(i,j) += B(i,j)*C(i,k)*D(j,k)",
            "chosen_cost": "time K*nnz(B_ij), memory 0, loop depth 3, memory depth 0",
            "reason": "least time with temporaries <= 1000000 elements",
            "stage1_sha": "91cf179d665ae243",
            "listing_sha": "33386e5aadaaf784",
        },
    },
    {
        "name": "SDDMM-SpMM",
        "subscripts": "ij,ik,jk,jl->il",
        "operands": [
            ("B", "ij", ("dense", "compressed")),
            ("C", "ik", ("dense", "dense")),
            ("D", "jk", ("dense", "dense")),
            ("E", "jl", ("dense", "dense")),
        ],
        "sizes": {"i": 20000, "j": 20000, "k": 32, "l": 32},
        "nnz": {"B": 400000},
        "expected": {
            "schedules": 394,
            "truncated": False,
            "stage1": 394,
            "stage2": 8,
            "buckets": 1,
            "frontier": [("K*nnz(B_ij) + L*nnz(B_ij)", "1", 2)],
            "frontier_costs": ["time K*nnz(B_ij) + L*nnz(B_ij), memory 1, loop depth 3, memory depth 0"],
            "chosen": "# A(i:d,l:d) = B(i:d,j:c) * C(i:d,k:d) * D(j:d,k:d) * E(j:d,l:d)\n"
            "for i:\n"
            "  for j_pos:\n"
            "    T1<> = 0\n"
            "    for k:\n"
            "      T1() += C(i,k)*D(j,k)\n"
            "    for l:\n"
            "      A(i,l) += B(i,j)*E(j,l)*T1()",
            "chosen_cost": "time K*nnz(B_ij) + L*nnz(B_ij), memory 1, loop depth 3, memory depth 0",
            "reason": "least time with temporaries <= 1000000 elements",
            "stage1_sha": "8895d53f8671c5c9",
            "listing_sha": "3c5b3c4b0e42f0c4",
        },
    },
    {
        "name": "TTM",
        "subscripts": "ijk,kl->ijl",
        "operands": [("B", "ijk", ("compressed", "compressed", "compressed")), ("C", "kl", ("dense", "dense"))],
        "sizes": {"i": 600, "j": 500, "k": 400, "l": 16},
        "nnz": {"B": [600, 12500, 200000]},
        "expected": {
            "schedules": 1,
            "truncated": False,
            "stage1": 1,
            "stage2": 1,
            "buckets": 1,
            "frontier": [("L*nnz(B_ijk)", "0", 1)],
            "frontier_costs": ["time L*nnz(B_ijk), memory 0, loop depth 4, memory depth 0"],
            "chosen": "# A(i:d,j:d,l:d) = B(i:c,j:c,k:c) * C(k:d,l:d)\n"
            "for i_pos:\n"
            "  for j_pos:\n"
            "    for k_pos:\n"
            "      for l:\n"
            "        A(i,j,l) += B(i,j,k)*C(k,l)",
            "chosen_cost": "time L*nnz(B_ijk), memory 0, loop depth 4, memory depth 0",
            "reason": "least time with temporaries <= 1000000 elements",
            "stage1_sha": "dadbb1dd2cff7a0e",
            "listing_sha": "7f0743a7e10f2638",
        },
    },
    {
        "name": "TTMc",
        "subscripts": "ijk,jl,km->ilm",
        "operands": [
            ("B", "ijk", ("compressed", "compressed", "compressed")),
            ("C", "jl", ("dense", "dense")),
            ("D", "km", ("dense", "dense")),
        ],
        "sizes": {"i": 600, "j": 500, "k": 400, "l": 16, "m": 16},
        "nnz": {"B": [600, 12500, 200000]},
        "expected": {
            "schedules": 10,
            "truncated": False,
            "stage1": 10,
            "stage2": 2,
            "buckets": 2,
            "frontier": [("K*L*M*nnz(B_i) + L*nnz(B_ijk)", "K", 1), ("L*M*nnz(B_ij) + M*nnz(B_ijk)", "1", 1)],
            "frontier_costs": [
                "time K*L*M*nnz(B_i) + L*nnz(B_ijk), memory K, loop depth 4, memory depth 1",
                "time L*M*nnz(B_ij) + M*nnz(B_ijk), memory 1, loop depth 4, memory depth 0",
            ],
            "chosen": "# A(i:d,l:d,m:d) = B(i:c,j:c,k:c) * C(j:d,l:d) * D(k:d,m:d)\n"
            "for i_pos:\n"
            "  for j_pos:\n"
            "    T1<m> = 0\n"
            "    for k_pos:\n"
            "      for m:\n"
            "        T1(m) += B(i,j,k)*D(k,m)\n"
            "    for l:\n"
            "      for m:\n"
            "        A(i,l,m) += C(j,l)*T1(m)",
            "chosen_cost": "time L*M*nnz(B_ij) + M*nnz(B_ijk), memory M, loop depth 4, memory depth 1",
            "reason": "least time with temporaries <= 1000000 elements; stage 5: same time, cache cost 0 instead of 32",
            "stage1_sha": "d737160ace34ac5c",
            "listing_sha": "60f193d84f1fe452",
        },
    },
    {
        "name": "MTTKRP",
        "subscripts": "ijk,jl,kl->il",
        "operands": [
            ("B", "ijk", ("compressed", "compressed", "compressed")),
            ("C", "jl", ("dense", "dense")),
            ("D", "kl", ("dense", "dense")),
        ],
        "sizes": {"i": 2000, "j": 1500, "k": 1000, "l": 32},
        "nnz": {"B": [2000, 12500, 200000]},
        "expected": {
            "schedules": 10,
            "truncated": False,
            "stage1": 10,
            "stage2": 2,
            "buckets": 2,
            "frontier": [("L*nnz(B_ijk)", "0", 1), ("L*nnz(B_ijk)", "1", 1)],
            "frontier_costs": [
                "time L*nnz(B_ij) + L*nnz(B_ijk), memory 1, loop depth 4, memory depth 0",
                "time L*nnz(B_ijk), memory 0, loop depth 4, memory depth 0",
            ],
            "chosen": "# A(i:d,l:d) = B(i:c,j:c,k:c) * C(j:d,l:d) * D(k:d,l:d)\n"
            "for i_pos:\n"
            "  for j_pos:\n"
            "    for k_pos:\n"
            "      for l:\n"
            "        A(i,l) += B(i,j,k)*C(j,l)*D(k,l)",
            "chosen_cost": "time L*nnz(B_ijk), memory 0, loop depth 4, memory depth 0",
            "reason": "least time with temporaries <= 1000000 elements",
            "stage1_sha": "19855b474de7bbd1",
            "listing_sha": "3bfb2b06a79bc0d5",
        },
    },
    {
        "name": "TTM chain",
        "subscripts": "ijk,kl,lm->ijm",
        "operands": [
            ("B", "ijk", ("compressed", "compressed", "compressed")),
            ("C", "kl", ("dense", "dense")),
            ("D", "lm", ("dense", "dense")),
        ],
        "sizes": {"i": 600, "j": 500, "k": 400, "l": 16, "m": 16},
        "nnz": {"B": [600, 12500, 200000]},
        "expected": {
            "schedules": 16,
            "truncated": False,
            "stage1": 16,
            "stage2": 2,
            "buckets": 2,
            "frontier": [("L*M*nnz(B_ij) + L*nnz(B_ijk)", "1", 1), ("K*L*M + M*nnz(B_ijk)", "K", 1)],
            "frontier_costs": [
                "time K*L*M + M*nnz(B_ijk), memory K, loop depth 4, memory depth 1",
                "time L*M*nnz(B_ij) + L*nnz(B_ijk), memory 1, loop depth 4, memory depth 0",
            ],
            "chosen": "# A(i:d,j:d,m:d) = B(i:c,j:c,k:c) * C(k:d,l:d) * D(l:d,m:d)\n"
            "T1<k,m> = 0\n"
            "for k:\n"
            "  for l:\n"
            "    for m:\n"
            "      T1(k,m) += C(k,l)*D(l,m)\n"
            "for i_pos:\n"
            "  for j_pos:\n"
            "    for k_pos:\n"
            "      for m:\n"
            "        A(i,j,m) += B(i,j,k)*T1(k,m)",
            "chosen_cost": "time K*L*M + M*nnz(B_ijk), memory K*M, loop depth 4, memory depth 2",
            "reason": "least time with temporaries <= 1000000 elements; stage 5: same time, cache cost 0 instead of 16",
            "stage1_sha": "cd6377412fd708a6",
            "listing_sha": "9c90d395246b39e4",
        },
    },
    {
        "name": "i,kli,ij,lim->",
        "subscripts": "i,kli,ij,lim->",
        "operands": [
            ("B", "i", ("dense",)),
            ("C", "kli", ("dense", "dense", "dense")),
            ("D", "ij", ("dense", "dense")),
            ("E", "lmi", ("dense", "dense", "dense")),
        ],
        "sizes": {"i": 3, "k": 2, "l": 2, "j": 3, "m": 2},
        "nnz": {},
        "expected": {
            "schedules": 4000,
            "truncated": True,
            "stage1": 4000,
            "stage2": 3969,
            "buckets": 2,
            "frontier": [("I*J*K*L*M", "0", 1), ("I*J + I*K*L + I*L*M", "I*L", 2)],
            "frontier_costs": [
                "time I*J + I*K*L + I*L*M, memory 1 + I*L, loop depth 3, memory depth 2",
                "time I*J*K*L*M, memory 0, loop depth 5, memory depth 0",
            ],
            "chosen": "# A() = B(i:d) * C(k:d,l:d,i:d) * D(i:d,j:d) * E(l:d,m:d,i:d)\n"
            "T1<i,l> = 0\n"
            "for k:\n"
            "  for i:\n"
            "    for l:\n"
            "      T1(i,l) += C(k,l,i)\n"
            "for i:\n"
            "  T2<> = 0\n"
            "  for j:\n"
            "    T2() += D(i,j)\n"
            "  for l:\n"
            "    for m:\n"
            "      A() += B(i)*E(l,m,i)*T1(i,l)*T2()",
            "chosen_cost": "time I*J + I*K*L + I*L*M, memory 1 + I*L, loop depth 3, memory depth 2",
            "reason": "least time with temporaries <= 1000000 elements",
            "stage1_sha": "35c13ccf232659ae",
            "listing_sha": "1f97dc2dab77f56a",
        },
    },
    {
        "name": "k,ik,lk,j->",
        "subscripts": "k,ik,lk,j->",
        "operands": [
            ("B", "k", ("dense",)),
            ("C", "ki", ("compressed", "compressed")),
            ("D", "kl", ("dense", "dense")),
            ("E", "j", ("dense",)),
        ],
        "sizes": {"k": 6, "i": 5, "l": 2, "j": 1},
        "nnz": {"C": [4, 4]},
        "expected": {
            "schedules": 4000,
            "truncated": True,
            "stage1": 4000,
            "stage2": 398,
            "buckets": 1,
            "frontier": [("J + L*nnz(C_k) + nnz(C_ki)", "1", 1)],
            "frontier_costs": ["time J + L*nnz(C_k) + nnz(C_ki), memory 2*1, loop depth 2, memory depth 0"],
            "chosen": "# A() = B(k:d) * C(k:c,i:c) * D(k:d,l:d) * E(j:d)\n"
            "T1<> = 0\n"
            "for j:\n"
            "  T1() += E(j)\n"
            "for k_pos:\n"
            "  T2<> = 0\n"
            "  for i_pos:\n"
            "    T2() += C(k,i)\n"
            "  for l:\n"
            "    A() += B(k)*D(k,l)*T1()*T2()",
            "chosen_cost": "time J + L*nnz(C_k) + nnz(C_ki), memory 2*1, loop depth 2, memory depth 0",
            "reason": "least time with temporaries <= 1000000 elements",
            "stage1_sha": "836b1998bd94a889",
            "listing_sha": "176c0c7f94474da6",
        },
    },
    {
        "name": "i,k,ij,lim->",
        "subscripts": "i,k,ij,lim->",
        "operands": [
            ("B", "i", ("dense",)),
            ("C", "k", ("dense",)),
            ("D", "ij", ("dense", "dense")),
            ("E", "lmi", ("dense", "dense", "dense")),
        ],
        "sizes": {"i": 3, "k": 2, "j": 3, "l": 2, "m": 2},
        "nnz": {},
        "expected": {
            "schedules": 4000,
            "truncated": True,
            "stage1": 4000,
            "stage2": 659,
            "buckets": 1,
            "frontier": [("I*J + I*L*M + K", "1", 8)],
            "frontier_costs": ["time I*J + I*L*M + K, memory 2*1, loop depth 3, memory depth 0"],
            "chosen": "# A() = B(i:d) * C(k:d) * D(i:d,j:d) * E(l:d,m:d,i:d)\n"
            "T1<> = 0\n"
            "for k:\n"
            "  T1() += C(k)\n"
            "T2<i> = 0\n"
            "for i:\n"
            "  for j:\n"
            "    T2(i) += D(i,j)\n"
            "for l:\n"
            "  for m:\n"
            "    for i:\n"
            "      A() += B(i)*E(l,m,i)*T1()*T2(i)",
            "chosen_cost": "time I*J + I*L*M + K, memory 1 + I, loop depth 3, memory depth 1",
            "reason": "least time with temporaries <= 1000000 elements; stage 5: same time, cache cost 0 instead of 3",
            "stage1_sha": "ca91123caff3975f",
            "listing_sha": "6bc84e502c07d5ce",
        },
    },
    {
        "name": "l,j,li,kjl->j",
        "subscripts": "l,j,li,kjl->j",
        "operands": [
            ("B", "l", ("dense",)),
            ("C", "j", ("compressed",)),
            ("D", "li", ("dense", "dense")),
            ("E", "kjl", ("dense", "dense", "dense")),
        ],
        "sizes": {"l": 6, "j": 1, "i": 1, "k": 1},
        "nnz": {"C": [0]},
        "expected": {
            "schedules": 2627,
            "truncated": False,
            "stage1": 2627,
            "stage2": 252,
            "buckets": 1,
            "frontier": [("I*L + K*L*nnz(C_j)", "1", 2)],
            "frontier_costs": ["time I*L + K*L*nnz(C_j), memory 1, loop depth 3, memory depth 0"],
            "chosen": "# A(j:c) = B(l:d) * C(j:c) * D(l:d,i:d) * E(k:d,j:d,l:d)\n"
            "for l:\n"
            "  for j_pos:\n"
            "    T1<> = 0\n"
            "    T1() += B(l)*C(j)\n"
            "    for k:\n"
            "      for i:\n"
            "        A(j) += D(l,i)*E(k,j,l)*T1()",
            "chosen_cost": "time I*K*L*nnz(C_j) + L*nnz(C_j), memory 1, loop depth 4, memory depth 0",
            "reason": "least time with temporaries <= 1000000 elements; stage 5: same time, cache cost 0 instead of 6",
            "stage1_sha": "9956ca94f11ab4df",
            "listing_sha": "f3a614fca98b217a",
        },
    },
    {
        "name": "j,jim,l,mk->ij",
        "subscripts": "j,jim,l,mk->ij",
        "operands": [
            ("B", "j", ("compressed",)),
            ("C", "jim", ("dense", "dense", "dense")),
            ("D", "l", ("dense",)),
            ("E", "mk", ("dense", "dense")),
        ],
        "sizes": {"j": 3, "i": 1, "m": 4, "l": 5, "k": 6},
        "nnz": {"B": [0]},
        "expected": {
            "schedules": 3064,
            "truncated": False,
            "stage1": 3064,
            "stage2": 62,
            "buckets": 1,
            "frontier": [("I*M*nnz(B_j) + K*M + L", "1", 2)],
            "frontier_costs": ["time I*M*nnz(B_j) + K*M + L, memory 2*1, loop depth 3, memory depth 0"],
            "chosen": "# A(i:d,j:d) = B(j:c) * C(j:d,i:d,m:d) * D(l:d) * E(m:d,k:d)\n"
            "T1<> = 0\n"
            "for l:\n"
            "  T1() += D(l)\n"
            "for j_pos:\n"
            "  for i:\n"
            "    for m:\n"
            "      T2<> = 0\n"
            "      T2() += B(j)*C(j,i,m)\n"
            "      for k:\n"
            "        A(i,j) += E(m,k)*T1()*T2()",
            "chosen_cost": "time I*K*M*nnz(B_j) + I*M*nnz(B_j) + L, memory 2*1, loop depth 4, memory depth 0",
            "reason": "least time with temporaries <= 1000000 elements; stage 5: same time, cache cost 0 instead of 7",
            "stage1_sha": "cefc4fc03c8c9955",
            "listing_sha": "204e12b36516b458",
        },
    },
    {
        "name": "l,il,kl,lij->i",
        "subscripts": "l,il,kl,lij->i",
        "operands": [
            ("B", "l", ("dense",)),
            ("C", "il", ("dense", "dense")),
            ("D", "kl", ("dense", "dense")),
            ("E", "jli", ("dense", "dense", "dense")),
        ],
        "sizes": {"l": 4, "i": 5, "k": 3, "j": 2},
        "nnz": {},
        "expected": {
            "schedules": 4000,
            "truncated": True,
            "stage1": 4000,
            "stage2": 169,
            "buckets": 1,
            "frontier": [("I*J*L + K*L", "1", 1)],
            "frontier_costs": ["time I*J*L + K*L, memory 1, loop depth 3, memory depth 0"],
            "chosen": "# A(i:d) = B(l:d) * C(i:d,l:d) * D(k:d,l:d) * E(j:d,l:d,i:d)\n"
            "T1<l> = 0\n"
            "for k:\n"
            "  for l:\n"
            "    T1(l) += D(k,l)\n"
            "for j:\n"
            "  for l:\n"
            "    for i:\n"
            "      A(i) += B(l)*C(i,l)*E(j,l,i)*T1(l)",
            "chosen_cost": "time I*J*L + K*L, memory L, loop depth 3, memory depth 1",
            "reason": "least time with temporaries <= 1000000 elements; stage 5: same time, cache cost 4 instead of 8",
            "stage1_sha": "07aaf8161768ac5e",
            "listing_sha": "52c2013440b7a8e0",
        },
    },
    {
        "name": "j,ik,lk,j->",
        "subscripts": "j,ik,lk,j->",
        "operands": [
            ("B", "j", ("dense",)),
            ("C", "ki", ("compressed", "compressed")),
            ("D", "kl", ("compressed", "compressed")),
            ("E", "j", ("dense",)),
        ],
        "sizes": {"j": 1, "i": 5, "k": 6, "l": 2},
        "nnz": {"C": [3, 3], "D": [1, 1]},
        "expected": {
            "schedules": 3011,
            "truncated": False,
            "stage1": 3011,
            "stage2": 156,
            "buckets": 2,
            "frontier": [
                ("J*nnz(C_k)*nnz(D_k)/K + nnz(C_k)*nnz(D_kl)/K + nnz(C_ki)*nnz(D_k)/K", "1", 8),
                ("J + nnz(C_k)*nnz(D_kl)/K + nnz(C_ki)*nnz(D_k)/K", "1", 6),
            ],
            "frontier_costs": [
                "time J + nnz(C_k)*nnz(D_kl)/K + nnz(C_ki)*nnz(D_k)/K, memory 2*1, loop depth 2, memory depth 0",
                "time J*nnz(C_k)*nnz(D_k)/K + nnz(C_k)*nnz(D_kl)/K + nnz(C_ki)*nnz(D_k)/K, memory "
                "2*1, loop depth 2, memory depth 0",
            ],
            "chosen": "# A() = B(j:d) * C(k:c,i:c) * D(k:c,l:c) * E(j:d)\n"
            "for k_pos:\n"
            "  T1<> = 0\n"
            "  for i_pos:\n"
            "    T1() += C(k,i)\n"
            "  T2<> = 0\n"
            "  for l_pos:\n"
            "    T2() += D(k,l)\n"
            "  for j:\n"
            "    A() += B(j)*E(j)*T1()*T2()",
            "chosen_cost": "time J*nnz(C_k)*nnz(D_k)/K + nnz(C_k)*nnz(D_kl)/K + nnz(C_ki)*nnz(D_k)/K, memory 2*1, "
            "loop depth 2, memory depth 0",
            "reason": "least time with temporaries <= 1000000 elements",
            "stage1_sha": "794f099cf6265fb4",
            "listing_sha": "b3b4dd20fa51f3bf",
        },
    },
    {
        "name": "k,lj,li,jm->ij",
        "subscripts": "k,lj,li,jm->ij",
        "operands": [
            ("B", "k", ("dense",)),
            ("C", "lj", ("dense", "dense")),
            ("D", "li", ("dense", "dense")),
            ("E", "jm", ("dense", "dense")),
        ],
        "sizes": {"k": 5, "l": 6, "j": 6, "i": 5, "m": 2},
        "nnz": {},
        "expected": {
            "schedules": 3016,
            "truncated": False,
            "stage1": 3016,
            "stage2": 84,
            "buckets": 1,
            "frontier": [("I*J*L + J*M + K", "1", 2)],
            "frontier_costs": ["time I*J*L + J*M + K, memory 2*1, loop depth 3, memory depth 0"],
            "chosen": "# A(i:d,j:d) = B(k:d) * C(l:d,j:d) * D(l:d,i:d) * E(j:d,m:d)\n"
            "T1<> = 0\n"
            "for k:\n"
            "  T1() += B(k)\n"
            "T2<j> = 0\n"
            "for j:\n"
            "  for m:\n"
            "    T2(j) += E(j,m)\n"
            "for l:\n"
            "  for i:\n"
            "    for j:\n"
            "      A(i,j) += C(l,j)*D(l,i)*T1()*T2(j)",
            "chosen_cost": "time I*J*L + J*M + K, memory 1 + J, loop depth 3, memory depth 1",
            "reason": "least time with temporaries <= 1000000 elements; stage 5: same time, cache cost 0 instead of 6",
            "stage1_sha": "79d792ab3f835489",
            "listing_sha": "56c92fe7a61701b5",
        },
    },
    {
        "name": "k,j,ilk,im->j",
        "subscripts": "k,j,ilk,im->j",
        "operands": [
            ("B", "k", ("dense",)),
            ("C", "j", ("compressed",)),
            ("D", "kil", ("compressed", "compressed", "compressed")),
            ("E", "im", ("dense", "dense")),
        ],
        "sizes": {"k": 4, "j": 5, "i": 1, "l": 3, "m": 2},
        "nnz": {"C": [0], "D": [1, 1, 1]},
        "expected": {
            "schedules": 1307,
            "truncated": False,
            "stage1": 1307,
            "stage2": 305,
            "buckets": 2,
            "frontier": [("I*M + nnz(C_j) + nnz(D_kil)", "I", 4), ("M*nnz(D_ki) + nnz(C_j) + nnz(D_kil)", "1", 2)],
            "frontier_costs": [
                "time I*M + nnz(C_j) + nnz(D_kil), memory 1 + I, loop depth 3, memory depth 1",
                "time M*nnz(D_ki) + nnz(C_j) + nnz(D_kil), memory 2*1, loop depth 3, memory depth 0",
            ],
            "chosen": "# A(j:c) = B(k:d) * C(j:c) * D(k:c,i:c,l:c) * E(i:d,m:d)\n"
            "T1<i> = 0\n"
            "for i:\n"
            "  for m:\n"
            "    T1(i) += E(i,m)\n"
            "T2<> = 0\n"
            "for k_pos:\n"
            "  for i_pos:\n"
            "    for l_pos:\n"
            "      T2() += B(k)*D(k,i,l)*T1(i)\n"
            "for j_pos:\n"
            "  A(j) += C(j)*T2()",
            "chosen_cost": "time I*M + nnz(C_j) + nnz(D_kil), memory 1 + I, loop depth 3, memory depth 1",
            "reason": "least time with temporaries <= 1000000 elements",
            "stage1_sha": "fba380763e12b540",
            "listing_sha": "4d59a96a207d5e91",
        },
    },
    {
        "name": "k,klm,klj,ji->",
        "subscripts": "k,klm,klj,ji->",
        "operands": [
            ("B", "k", ("dense",)),
            ("C", "klm", ("dense", "dense", "dense")),
            ("D", "ljk", ("compressed", "compressed", "compressed")),
            ("E", "ji", ("dense", "dense")),
        ],
        "sizes": {"k": 2, "l": 5, "m": 4, "j": 4, "i": 3},
        "nnz": {"D": [0, 0, 0]},
        "expected": {
            "schedules": 1938,
            "truncated": False,
            "stage1": 1938,
            "stage2": 225,
            "buckets": 4,
            "frontier": [
                ("I*nnz(D_lj) + K*M*nnz(D_l) + nnz(D_ljk)", "K", 2),
                ("I*J + M*nnz(D_ljk)", "J", 2),
                ("I*J + K*M*nnz(D_l) + nnz(D_ljk)", "J + K", 6),
                ("I*nnz(D_ljk) + M*nnz(D_ljk)", "1", 2),
            ],
            "frontier_costs": [
                "time I*J + K*M*nnz(D_l) + nnz(D_ljk), memory J + K, loop depth 3, memory depth 1",
                "time I*J + M*nnz(D_ljk), memory J, loop depth 4, memory depth 1",
                "time I*nnz(D_lj) + K*M*nnz(D_l) + nnz(D_ljk), memory 1 + K, loop depth 3, memory depth 1",
                "time I*nnz(D_ljk) + M*nnz(D_ljk) + nnz(D_ljk), memory 2*1, loop depth 4, memory depth 0",
            ],
            "chosen": "# A() = B(k:d) * C(k:d,l:d,m:d) * D(l:c,j:c,k:c) * E(j:d,i:d)\n"
            "for l_pos:\n"
            "  for j_pos:\n"
            "    for k_pos:\n"
            "      T1<> = 0\n"
            "      T1() += B(k)*D(l,j,k)\n"
            "      T2<> = 0\n"
            "      for m:\n"
            "        T2() += C(k,l,m)*T1()\n"
            "      for i:\n"
            "        A() += E(j,i)*T2()",
            "chosen_cost": "time I*nnz(D_ljk) + M*nnz(D_ljk) + nnz(D_ljk), memory 2*1, loop depth 4, memory depth 0",
            "reason": "least time with temporaries <= 1000000 elements",
            "stage1_sha": "aa9b7cb3fdbc1710",
            "listing_sha": "68eb83b792635924",
        },
    },
]


@pytest.mark.parametrize("case", CASES, ids=[f"{k}:{c['name']}" for k, c in enumerate(CASES)])
def test_plan_is_unchanged(case):
    _stages.cache_clear()
    assert _summary(case) == case["expected"]
