/* A stand-in libcuda.so.1 for the CI's check of tests/gpu/run.sh on a machine without a GPU: it
 * says the driver supports CUDA 12.8 and nothing else, so that the CUDA runtime linked into the
 * GPU check's binaries (a newer one) refuses it as too old, as it would an old driver on a GPU
 * machine. run.sh must then say so and exit 2, not report "no CUDA device". */
int cuDriverGetVersion(int* version) {
  *version = 12080;
  return 0;
}

int cuInit(unsigned int flags) {
  (void)flags;
  return 0;
}
