#include "common/cuda/cuda_handles.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "common/cuda/cuda_status.h"

namespace kvtier::cuda {

ScopedDevice::ScopedDevice(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  if (previous_ != device) {
    status_ = CudaStatus(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }
}

ScopedDevice::~ScopedDevice() {
  int current = -1;
  if (previous_ >= 0 && cudaGetDevice(&current) == cudaSuccess && current != previous_) {
    (void)cudaSetDevice(previous_);
  }
}

Result<Stream> Stream::Create(int device) {
  ScopedDevice scoped(device);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  cudaStream_t stream = nullptr;
  KVTIER_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                              "cudaStreamCreateWithFlags");
  return Stream(stream, device);
}

Stream::~Stream() { Reset(); }
Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    Reset();
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Stream::Reset() {
  if (stream_ == nullptr) return;
  ScopedDevice scoped(device_);
  (void)cudaStreamDestroy(std::exchange(stream_, nullptr));
}

Status Stream::Synchronize() const {
  return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

Result<Event> Event::Create(int device, const Options& options) {
  ScopedDevice scoped(device);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  unsigned flags = cudaEventDefault;
  if (!options.timing || options.interprocess) flags |= cudaEventDisableTiming;
  if (options.interprocess) flags |= cudaEventInterprocess;
  if (options.blocking_sync) flags |= cudaEventBlockingSync;
  cudaEvent_t event = nullptr;
  KVTIER_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags), "cudaEventCreateWithFlags");
  return Event(event, device);
}

Event::~Event() { Reset(); }
Event::Event(Event&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Reset();
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Event::Reset() {
  if (event_ == nullptr) return;
  ScopedDevice scoped(device_);
  (void)cudaEventDestroy(std::exchange(event_, nullptr));
}

Status Event::Record(const Stream& stream) {
  return CudaStatus(cudaEventRecord(event_, stream.get()), "cudaEventRecord");
}

Status Event::MakeStreamWait(const Stream& stream) const {
  return CudaStatus(cudaStreamWaitEvent(stream.get(), event_, 0), "cudaStreamWaitEvent");
}

Status Event::Synchronize() const {
  return CudaStatus(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

Result<float> Event::ElapsedMs(const Event& start, const Event& end) {
  float ms = 0;
  KVTIER_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.event_, end.event_),
                              "cudaEventElapsedTime");
  return ms;
}

Result<DeviceBuffer> DeviceBuffer::Allocate(int device, size_t bytes) {
  if (bytes == 0) return InvalidArgument("cannot allocate 0 bytes of device memory");
  ScopedDevice scoped(device);
  KVTIER_RETURN_IF_ERROR(scoped.status());
  void* data = nullptr;
  KVTIER_CUDA_RETURN_IF_ERROR(
      cudaMalloc(&data, bytes),
      "cudaMalloc(" + std::to_string(bytes) + " bytes on device " + std::to_string(device) + ")");
  return DeviceBuffer(static_cast<std::byte*>(data), bytes, device);
}

DeviceBuffer::~DeviceBuffer() { Reset(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(other.device_) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (data_ == nullptr) return;
  ScopedDevice scoped(device_);
  (void)cudaFree(std::exchange(data_, nullptr));
  bytes_ = 0;
}

}  // namespace kvtier::cuda
