#include "tiers/remote/testing/test_tls.h"

#include <fstream>
#include <vector>

#include "tiers/remote/testing/redis_process.h"

namespace kvtier::tiers::remote::testing {
namespace {

// EC keys: quick to make, as strong as the test needs.
Status MakeCa(const std::string& dir, const std::string& name) {
  return RunProgram({OPENSSL_PATH, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                     "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", dir + "/" + name + ".key",
                     "-out", dir + "/" + name + ".crt", "-days", "2", "-subj",
                     "/CN=kvtier test " + name})
      .status();
}

}  // namespace

Result<TestCertificates> MakeTestCertificates(const std::string& dir) {
  KVTIER_RETURN_IF_ERROR(MakeCa(dir, "ca"));
  KVTIER_RETURN_IF_ERROR(MakeCa(dir, "other-ca"));
  KVTIER_RETURN_IF_ERROR(
      RunProgram({OPENSSL_PATH, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-keyout", dir + "/server.key", "-out", dir + "/server.csr", "-subj",
                  "/CN=redis.test"})
          .status());
  {
    std::ofstream ext(dir + "/server.ext");
    ext << "subjectAltName=IP:127.0.0.1,DNS:redis.test\n";
  }
  KVTIER_RETURN_IF_ERROR(
      RunProgram({OPENSSL_PATH, "x509", "-req", "-in", dir + "/server.csr", "-CA", dir + "/ca.crt",
                  "-CAkey", dir + "/ca.key", "-CAcreateserial", "-out", dir + "/server.crt",
                  "-days", "2", "-extfile", dir + "/server.ext"})
          .status());
  return TestCertificates{.ca_file = dir + "/ca.crt",
                          .other_ca_file = dir + "/other-ca.crt",
                          .server_cert_file = dir + "/server.crt",
                          .server_key_file = dir + "/server.key"};
}

}  // namespace kvtier::tiers::remote::testing
