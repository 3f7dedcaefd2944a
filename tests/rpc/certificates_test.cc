// rpc/certificates.h: what `tessera certs` writes, checked with OpenSSL's own verifier.
#include "rpc/certificates.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::rpc {
namespace {

using ::tessera::testing::IsOk;
using ::testing::HasSubstr;

X509* ReadCert(const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFileToString(path);
  EXPECT_THAT(pem, IsOk());
  BIO* bio = BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return cert;
}

// Whether `leaf` chains to `ca` for TLS server use with `host` as its name.
bool Verifies(X509* ca, X509* leaf, const std::string& host) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  if (host.find_first_not_of("0123456789.") == std::string::npos) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
  }
  const bool ok = X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok;
}

TEST(CertificatesTest, EveryHostGetsAFolderWhoseCertificateChainsToTheCa) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/certs");
  std::filesystem::remove_all(dir);
  auto folders =
      MakeCertificates({.dir = dir, .hosts = {"10.0.0.2", "ps-0.ps", "*.workers.default.svc"}});
  ASSERT_THAT(folders, IsOk());
  EXPECT_EQ(*folders, (std::vector<std::string>{dir + "/10.0.0.2", dir + "/ps-0.ps",
                                                dir + "/_.workers.default.svc"}));
  X509* ca = ReadCert(dir + "/ca.pem");
  ASSERT_NE(ca, nullptr);
  X509* ip = ReadCert(dir + "/10.0.0.2/cert.pem");
  X509* dns = ReadCert(dir + "/ps-0.ps/cert.pem");
  X509* wildcard = ReadCert(dir + "/_.workers.default.svc/cert.pem");
  ASSERT_NE(ip, nullptr);
  ASSERT_NE(dns, nullptr);
  ASSERT_NE(wildcard, nullptr);
  EXPECT_TRUE(Verifies(ca, ip, "10.0.0.2"));
  EXPECT_FALSE(Verifies(ca, ip, "10.0.0.3"));
  EXPECT_TRUE(Verifies(ca, dns, "ps-0.ps"));
  EXPECT_FALSE(Verifies(ca, dns, "ps-1.ps"));
  EXPECT_TRUE(Verifies(ca, wildcard, "worker-3.workers.default.svc"));

  // Each folder is a --tls_dir on its own: the CA beside the certificate.
  EXPECT_EQ(*ReadFileToString(dir + "/ps-0.ps/ca.pem"), *ReadFileToString(dir + "/ca.pem"));
  for (const char* key : {"/ca.key", "/ps-0.ps/key.pem", "/10.0.0.2/key.pem"}) {
    struct stat st;
    ASSERT_EQ(stat((dir + key).c_str(), &st), 0) << key;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << key;
  }

  // A second call adds hosts with the same CA.
  ASSERT_THAT(MakeCertificates({.dir = dir, .hosts = {"ps-1.ps"}}), IsOk());
  X509* later = ReadCert(dir + "/ps-1.ps/cert.pem");
  EXPECT_TRUE(Verifies(ca, later, "ps-1.ps"));
  for (X509* cert : {ca, ip, dns, wildcard, later}) X509_free(cert);
}

TEST(CertificatesTest, OneCertificateNamesEveryHostOfAnEntryJoinedByPlus) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/multi_certs");
  std::filesystem::remove_all(dir);
  auto folders = MakeCertificates(
      {.dir = dir, .hosts = {"*.tessera-ps.ml.svc+*.tessera-worker.ml.svc+10.1.2.3"}});
  ASSERT_THAT(folders, IsOk());
  EXPECT_EQ(*folders, (std::vector<std::string>{dir + "/_.tessera-ps.ml.svc"}));
  X509* ca = ReadCert(dir + "/ca.pem");
  X509* cert = ReadCert(dir + "/_.tessera-ps.ml.svc/cert.pem");
  ASSERT_NE(ca, nullptr);
  ASSERT_NE(cert, nullptr);
  EXPECT_TRUE(Verifies(ca, cert, "tessera-ps-0.tessera-ps.ml.svc"));
  EXPECT_TRUE(Verifies(ca, cert, "tessera-worker-1.tessera-worker.ml.svc"));
  EXPECT_TRUE(Verifies(ca, cert, "10.1.2.3"));
  EXPECT_FALSE(Verifies(ca, cert, "tessera-submit-0.tessera-submit.ml.svc"));
  X509_free(cert);
  X509_free(ca);
  EXPECT_THAT(MakeCertificates({.dir = dir, .hosts = {"a.b+../etc"}}).status().message(),
              HasSubstr("host '../etc'"));
  EXPECT_THAT(MakeCertificates({.dir = dir, .hosts = {"a.b+"}}).status().message(),
              HasSubstr("host ''"));
}

TEST(CertificatesTest, HostsThatAreNotNamesOrAddressesAreRefused) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/bad_certs");
  for (const char* host : {"", "a b", "../etc", "-lead.example", "a..b", "x/y"}) {
    const absl::Status status = MakeCertificates({.dir = dir, .hosts = {host}}).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << host;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("'", host, "'"))) << host;
  }
  EXPECT_THAT(MakeCertificates({.dir = dir, .hosts = {}}).status().message(),
              HasSubstr("names no host"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/ca.key"));
}

}  // namespace
}  // namespace tessera::rpc
