// Test helper: a throwaway certificate authority and a server certificate for TLS tests, made with
// the openssl command (Debian's `openssl` package, which scripts/install-deps.sh installs).
#pragma once

#include <string>

#include "common/status.h"

namespace kvtier::tiers::remote::testing {

struct TestCertificates {
  std::string ca_file;           // the CA that signed the server's certificate
  std::string other_ca_file;     // a CA that signed nothing here: verification must fail with it
  std::string server_cert_file;  // for 127.0.0.1 and the DNS name "redis.test"
  std::string server_key_file;
};

// Writes the files into `dir` (which must exist). kDeviceError when openssl fails.
Result<TestCertificates> MakeTestCertificates(const std::string& dir);

}  // namespace kvtier::tiers::remote::testing
