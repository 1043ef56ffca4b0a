// RAII owners of the CUDA objects kvtier holds: the current-device switch, streams, events and
// device allocations. Each CUDA object lives in exactly one of these and is released in its
// destructor (errors there are ignored: there is no one to report them to, and a failed release
// of a dying context frees nothing anyway).
//
// The header does not include the CUDA runtime (it forward-declares the two handle types, as CUDA
// itself does), so that interfaces built on it compile in any translation unit; the definitions
// are compiled only in CUDA builds (KVTIER_WITH_CUDA). Every factory sets the device it is given
// for the duration of the call only (ScopedDevice) and leaves the calling thread's current device
// as it found it.
//
// Thread safety: the objects are move-only values without internal locking. CUDA streams and
// events may be used from several threads at once (CUDA serialises them); moving or destroying an
// object while another thread uses it is the caller's bug.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*

namespace kvtier::cuda {

// Makes `device` the calling thread's current device until destruction, then restores the
// previous one. status() is the outcome of the switch; check it before using the device.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  Status status_;
};

// A non-blocking CUDA stream (it does not synchronise with the legacy default stream).
class Stream {
 public:
  // Errors: CudaStatus of cudaSetDevice / cudaStreamCreateWithFlags.
  static Result<Stream> Create(int device);
  Stream() = default;
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CUstream_st* get() const { return stream_; }
  int device() const { return device_; }
  // Waits for everything queued on the stream. kDeviceError (or another CudaStatus code) when any
  // of it failed; the failed work's results must not be used.
  Status Synchronize() const;

 private:
  Stream(CUstream_st* stream, int device) : stream_(stream), device_(device) {}
  void Reset();

  CUstream_st* stream_ = nullptr;
  int device_ = -1;
};

// A CUDA event. Timing is off unless asked for (cheaper to record); `interprocess` events can be
// shared with cudaIpcGetEventHandle (common/cuda/ipc.h) and never carry timing.
class Event {
 public:
  struct Options {
    bool timing = false;
    bool interprocess = false;
    bool blocking_sync = true;  // Synchronize() sleeps instead of spinning on a CPU core
  };
  static Result<Event> Create(int device, const Options& options);
  // Takes ownership of an event opened elsewhere (cudaIpcOpenEventHandle).
  static Event Adopt(CUevent_st* event, int device) { return Event(event, device); }
  Event() = default;
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  CUevent_st* get() const { return event_; }
  // Captures the work queued on `stream` so far.
  Status Record(const Stream& stream);
  // Makes `stream` wait (on the device, without blocking the host) for the last Record.
  Status MakeStreamWait(const Stream& stream) const;
  // Blocks the calling thread until the last Record's work is done.
  Status Synchronize() const;
  // Milliseconds between two recorded timing events (both created with timing = true).
  static Result<float> ElapsedMs(const Event& start, const Event& end);

 private:
  Event(CUevent_st* event, int device) : event_(event), device_(device) {}
  void Reset();

  CUevent_st* event_ = nullptr;
  int device_ = -1;
};

// One cudaMalloc'ed range of device memory.
class DeviceBuffer {
 public:
  // Errors: kInvalidArgument for 0 bytes; kBusy when the device has not that much free memory;
  // other CudaStatus codes.
  static Result<DeviceBuffer> Allocate(int device, size_t bytes);
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::byte* get() const { return data_; }
  size_t size() const { return bytes_; }
  int device() const { return device_; }

 private:
  DeviceBuffer(std::byte* data, size_t bytes, int device)
      : data_(data), bytes_(bytes), device_(device) {}
  void Reset();

  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
};

}  // namespace kvtier::cuda
