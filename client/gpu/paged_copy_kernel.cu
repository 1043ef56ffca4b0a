#include "client/gpu/paged_copy_kernel.h"

namespace kvtier::client::gpu {
namespace {

// __grid_constant__: threads read the 3 KiB parameter where it is (constant memory) rather than
// each taking a local copy when PagedCopyThread takes it by reference.
__global__ void __launch_bounds__(kKernelThreads)
    PagedCopyKernel(const __grid_constant__ PagedCopyArgs args) {
  PagedCopyThread(args, blockIdx.x, threadIdx.x, blockIdx.y, blockIdx.z);
}

}  // namespace

cudaError_t LaunchPagedCopy(const PagedCopyArgs& args, cudaStream_t stream) {
  if (args.planes == 0 || args.planes > kKernelMaxPlanes || args.entries == 0 ||
      args.entries > kKernelMaxBatch || args.slices == 0 || args.layer_block_bytes == 0) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(args.slices, args.planes, args.entries);
  // A launch reports its error only through cudaGetLastError, which would also return an error
  // an earlier, unrelated call left behind (a refused cudaHostRegister): forget that one first.
  (void)cudaGetLastError();
  PagedCopyKernel<<<grid, kKernelThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace kvtier::client::gpu
