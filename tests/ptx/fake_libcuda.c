/* A stand-in libcuda.so.1 for tests/ptx/test_driver.py: enough of the driver API, with host
 * memory as "device" memory, for ptx.driver on the real cuda-bindings to run without a GPU.
 * cuda-bindings finds every entry point through cuGetProcAddress_v2. "vadd"(u64 a, u64 b,
 * u64 c, u32 n) runs on the host, so kernelParams marshalling is checked end to end. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
static int inited;
static void *current;
static char fname[256];
#define CHECK \
    if (!inited) return 3 /* CUDA_ERROR_NOT_INITIALIZED */
#define CTX \
    if (!current) return 201 /* CUDA_ERROR_INVALID_CONTEXT */

static CUresult unimplemented(void) { return 801; /* CUDA_ERROR_NOT_SUPPORTED */ }
static CUresult f_cuInit(unsigned flags) { inited = flags == 0; return flags ? 1 : 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
static CUresult f_cuDeviceGetCount(int *n) { CHECK; *n = 1; return 0; }
static CUresult f_cuDeviceGet(int *d, int o) { CHECK; if (o) return 101; *d = 0; return 0; }
static CUresult f_cuDeviceGetName(char *name, int len, int dev) {
    CHECK; memset(name, 0, len); strncpy(name, "Fake H200", len - 1); return 0; }
static CUresult f_cuDeviceGetAttribute(int *v, int attr, int dev) {
    CHECK; if (attr == 75) *v = 9; else if (attr == 76) *v = 0; else return 1; return 0; }
static CUresult f_cuDevicePrimaryCtxRetain(void **ctx, int dev) { CHECK; *ctx = (void *)0x1234; return 0; }
static CUresult f_cuCtxSetCurrent(void *ctx) { CHECK; current = ctx; return 0; }
static CUresult f_cuCtxSynchronize(void) { CHECK; CTX; return 0; }
static CUresult f_cuMemAlloc(uint64_t *p, size_t n) { CHECK; CTX; *p = (uint64_t)(uintptr_t)malloc(n); return 0; }
static CUresult f_cuMemFree(uint64_t p) { CHECK; free((void *)(uintptr_t)p); return 0; }
static CUresult f_cuMemcpyHtoD(uint64_t d, const void *h, size_t n) { CHECK; CTX; memcpy((void *)(uintptr_t)d, h, n); return 0; }
static CUresult f_cuMemcpyDtoH(void *h, uint64_t d, size_t n) { CHECK; CTX; memcpy(h, (void *)(uintptr_t)d, n); return 0; }
static CUresult f_cuMemsetD8(uint64_t d, unsigned char v, size_t n) { CHECK; CTX; memset((void *)(uintptr_t)d, v, n); return 0; }
static CUresult f_cuModuleLoadData(void **m, const void *img) {
    CHECK; CTX; if (memcmp(img, "\x7f" "ELF", 4)) return 200; *m = (void *)0x5678; return 0; }
static CUresult f_cuModuleUnload(void *m) { CHECK; return m == (void *)0x5678 ? 0 : 400; }
static CUresult f_cuModuleGetFunction(void **f, void *m, const char *name) {
    CHECK; if (m != (void *)0x5678) return 400; strncpy(fname, name, 255); *f = fname; return 0; }
static CUresult f_cuFuncGetAttribute(int *v, int attr, void *f) { CHECK; *v = attr == 4 ? 42 : 0; return 0; }
static CUresult f_cuFuncSetAttribute(void *f, int attr, int v) { CHECK; return attr == 8 ? 0 : 1; }
/* the last launch of any other kernel, for tests: geometry, shared bytes and the parameter bytes
 * (sizes announced by fake_set_param_sizes, since the driver API does not carry them) */
static unsigned last_geom[7];
static int n_sizes, sizes[32], launches;
static unsigned char last_params[32 * 128];
void fake_set_param_sizes(int n, const int *s) { n_sizes = n < 32 ? n : 32; memcpy(sizes, s, n_sizes * sizeof(int)); }
int fake_last_launch(unsigned *geom, unsigned char *params) {
    memcpy(geom, last_geom, sizeof last_geom); memcpy(params, last_params, sizeof last_params); return launches; }
static CUresult f_cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned smem, void *stream, void **params, void **extra) {
    CHECK; CTX;
    if (extra || f != fname) return 1;
    if (strcmp(fname, "vadd")) {
        unsigned g[7] = {gx, gy, gz, bx, by, bz, smem};
        memcpy(last_geom, g, sizeof g);
        for (int i = 0, off = 0; i < n_sizes && off + sizes[i] <= (int)sizeof last_params; off += sizes[i++])
            memcpy(last_params + off, params[i], sizes[i]);
        launches++;
        return 0;
    }
    if (gy != 1 || gz != 1 || by != 1 || bz != 1) return 1;
    {
        float *a = *(float **)params[0], *b = *(float **)params[1], *c = *(float **)params[2];
        unsigned n = *(unsigned *)params[3];
        for (unsigned i = 0; i < n && i < gx * bx; i++) c[i] = a[i] + b[i];
    }
    return 0;
}
/* the 128-byte CUtensorMap as 16 u64: address, rank, dims, strides (rank-1), box, element strides,
 * then interleave, swizzle, l2 promotion, oob fill, data type: the test reads them back */
static CUresult f_cuTensorMapEncodeTiled(uint64_t *tm, int dtype, unsigned rank, void *addr, const uint64_t *dims,
                                         const uint64_t *strides, const uint32_t *box, const uint32_t *estr,
                                         int interleave, int swizzle, int l2, int oob) {
    CHECK;
    if (rank < 1 || rank > 2) return 1;
    unsigned i = 0;
    memset(tm, 0, 128);
    tm[i++] = (uint64_t)(uintptr_t)addr; tm[i++] = rank;
    for (unsigned d = 0; d < rank; d++) tm[i++] = dims[d];
    for (unsigned d = 0; d + 1 < rank; d++) tm[i++] = strides[d];
    for (unsigned d = 0; d < rank; d++) tm[i++] = box[d];
    for (unsigned d = 0; d < rank; d++) tm[i++] = estr[d];
    tm[i++] = interleave; tm[i++] = swizzle; tm[i++] = l2; tm[i++] = oob; tm[i++] = dtype;
    return 0;
}
static CUresult f_cuEventCreate(void **e, unsigned flags) { CHECK; CTX; *e = calloc(1, sizeof(int)); return 0; }
static CUresult f_cuEventRecord(void *e, void *s) { CHECK; *(int *)e = 1; return 0; }
static CUresult f_cuEventSynchronize(void *e) { CHECK; return 0; }
static CUresult f_cuEventElapsedTime(float *ms, void *a, void *b) {
    CHECK; if (!*(int *)a || !*(int *)b) return 400; *ms = 0.5f; return 0; }
static CUresult f_cuEventDestroy(void *e) { CHECK; free(e); return 0; }
static CUresult f_cuGetErrorName(CUresult e, const char **s) {
    switch (e) {
    case 0: *s = "CUDA_SUCCESS"; break;
    case 1: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case 3: *s = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case 200: *s = "CUDA_ERROR_INVALID_IMAGE"; break;
    case 201: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case 400: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
    default: *s = 0; return 1;
    }
    return 0;
}
static CUresult f_cuGetErrorString(CUresult e, const char **s) { *s = "fake description"; return 0; }

#define E(n) {#n, (void *)f_##n}
static struct { const char *name; void *fn; } table[] = {
    E(cuInit), E(cuDeviceGetCount), E(cuDeviceGet), E(cuDeviceGetName), E(cuDeviceGetAttribute),
    E(cuDevicePrimaryCtxRetain), E(cuCtxSetCurrent), E(cuCtxSynchronize), E(cuMemAlloc), E(cuMemFree),
    E(cuMemcpyHtoD), E(cuMemcpyDtoH), E(cuMemsetD8), E(cuModuleLoadData), E(cuModuleUnload),
    E(cuModuleGetFunction), E(cuFuncGetAttribute), E(cuFuncSetAttribute), E(cuLaunchKernel), E(cuTensorMapEncodeTiled),
    E(cuEventCreate), E(cuEventRecord), E(cuEventSynchronize), E(cuEventElapsedTime), E(cuEventDestroy),
    E(cuGetErrorName), E(cuGetErrorString), {"cuDriverGetVersion", (void *)cuDriverGetVersion}, {0, 0}};

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *status) {
    if (status) *status = 0;
    for (int i = 0; table[i].name; i++)
        if (!strcmp(table[i].name, sym)) { *pfn = table[i].fn; return 0; }
    *pfn = (void *)unimplemented;
    return 0;
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, uint64_t flags) {
    return cuGetProcAddress_v2(sym, pfn, ver, flags, 0);
}
