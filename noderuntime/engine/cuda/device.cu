/* The CUDA engine outside a stage: conversions between fp32 and the activation type, activation
 * buffers (allocate, upload, download) and the device's name. */
#include "stage.cuh"

namespace GPU_NS {

namespace {

__global__ void cast_kernel(floatX *out, const float *in, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        put(out + i, in[i]);
}
__global__ void uncast_kernel(float *out, const floatX *in, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = tof(in[i]);
}

} /* namespace */

int launch_cast(cudaStream_t stream, floatX *out, const float *in, size_t n, char *EB, size_t EN)
{
    if (n == 0)
        return 0;
    cast_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, in, n);
    LAUNCHED(stream);
    return 0;
}
int launch_uncast(cudaStream_t stream, float *out, const floatX *in, size_t n, char *EB, size_t EN)
{
    if (n == 0)
        return 0;
    uncast_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, in, n);
    LAUNCHED(stream);
    return 0;
}

} /* namespace GPU_NS */

using namespace GPU_NS;

const char *gpu_precision_name(void) { return PREC_NAME; }
size_t gpu_act_bytes(void) { return sizeof(floatX); }

void *gpu_act_alloc(size_t n, herr *e)
{
    void *p = NULL;
    cudaError_t ce = cudaMalloc(&p, (n ? n : 1) * sizeof(floatX));
    if (ce != cudaSuccess) {
        herr_set(e, "CUDA: cannot allocate %zu activations: %s", n, cudaGetErrorString(ce));
        return NULL;
    }
    return p;
}
void gpu_act_free(void *p)
{
    if (p)
        cudaFree(p);
}

int gpu_act_upload(void *dev, const float *host, size_t n, herr *e)
{
    char *EB = e ? e->msg : NULL;
    size_t EN = e ? sizeof e->msg : 0;
    float *tmp = NULL;
    COUNT_SYNC();
    CK(cudaDeviceSynchronize()); /* no stream still reads dev (forward and backward do not sync) */
    CK(cudaMalloc(&tmp, (n ? n : 1) * sizeof(float)));
    cudaError_t ce = cudaMemcpy(tmp, host, n * sizeof(float), cudaMemcpyHostToDevice);
    int rc = ce == cudaSuccess ? launch_cast(0, (floatX *)dev, tmp, n, EB, EN) : 0;
    if (ce == cudaSuccess && rc == 0)
        ce = cudaDeviceSynchronize();
    cudaFree(tmp);
    if (rc < 0)
        return -1;
    if (ce != cudaSuccess)
        return fail_msg(EB, EN, "CUDA: activation upload: %s", cudaGetErrorString(ce));
    return 0;
}

int gpu_act_download(float *host, const void *dev, size_t n, herr *e)
{
    char *EB = e ? e->msg : NULL;
    size_t EN = e ? sizeof e->msg : 0;
    float *tmp = NULL;
    COUNT_SYNC();
    CK(cudaDeviceSynchronize()); /* every stream's writes of dev are done */
    CK(cudaMalloc(&tmp, (n ? n : 1) * sizeof(float)));
    cudaError_t ce = cudaSuccess;
    int rc = launch_uncast(0, tmp, (const floatX *)dev, n, EB, EN);
    if (rc == 0)
        ce = cudaDeviceSynchronize();
    if (rc == 0 && ce == cudaSuccess)
        ce = cudaMemcpy(host, tmp, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(tmp);
    if (rc < 0)
        return -1;
    if (ce != cudaSuccess)
        return fail_msg(EB, EN, "CUDA: activation download: %s", cudaGetErrorString(ce));
    return 0;
}

int gpu_device_name(char *buf, size_t len, herr *e)
{
    char *EB = e ? e->msg : NULL;
    size_t EN = e ? sizeof e->msg : 0;
    int dev = 0;
    cudaDeviceProp p;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&p, dev));
    snprintf(buf, len, "%s, %d SMs, %.0f GiB, compute capability %d.%d", p.name,
             p.multiProcessorCount, p.totalGlobalMem / 1073741824.0, p.major, p.minor);
    return 0;
}
