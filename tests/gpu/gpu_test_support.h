// Support for tests that need a CUDA device (ctest label `gpu`).
//
// On a machine without a device such a test skips, naming the reason, so that a plain `ctest` on
// a CPU-only machine with nvcc still passes. tests/gpu/run.sh sets KVTIER_REQUIRE_GPU=1, which
// turns the skip into a failure: on the GPU machine a test that cannot reach the device is broken,
// not skipped.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>

#include "common/cuda/probe.h"

// Use at the top of a TEST body (or SetUp): skips, or fails under KVTIER_REQUIRE_GPU, unless
// CUDA device 0 is usable.
#define KVTIER_REQUIRE_CUDA_DEVICE()                                            \
  do {                                                                          \
    const ::kvtier::Status _kvtier_probe = ::kvtier::cuda::ProbeDevice(0);      \
    if (!_kvtier_probe.ok()) {                                                  \
      if (std::getenv("KVTIER_REQUIRE_GPU") != nullptr) {                       \
        FAIL() << "KVTIER_REQUIRE_GPU is set but " << _kvtier_probe.ToString(); \
      }                                                                         \
      GTEST_SKIP() << "needs a CUDA device: " << _kvtier_probe.ToString();      \
    }                                                                           \
  } while (0)
