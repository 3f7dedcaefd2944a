#include "rpc/certificates.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <filesystem>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "rpc/transport_security.h"

namespace tessera::rpc {
namespace {

struct FreeKey {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct FreeCert {
  void operator()(X509* p) const { X509_free(p); }
};
struct FreeBio {
  void operator()(BIO* p) const { BIO_free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, FreeKey>;
using Cert = std::unique_ptr<X509, FreeCert>;
using Bio = std::unique_ptr<BIO, FreeBio>;

constexpr char kCaKeyFile[] = "ca.key";

absl::Status OpenSslError(absl::string_view what) {
  return absl::InternalError(absl::StrCat("OpenSSL could not ", what));
}

bool IsIpAddress(const std::string& host) {
  unsigned char buffer[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

// A DNS name (RFC 1123 labels, a leading "*." allowed) or an IP address.
bool IsValidHost(const std::string& host) {
  if (IsIpAddress(host)) return true;
  absl::string_view rest = host;
  if (rest.substr(0, 2) == "*.") rest.remove_prefix(2);
  if (rest.empty() || rest.size() > 253) return false;
  size_t label = 0;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i == rest.size() || rest[i] == '.') {
      if (label == 0 || label > 63 || rest[i - 1] == '-') return false;
      label = 0;
    } else if (absl::ascii_isalnum(rest[i]) || (rest[i] == '-' && label > 0)) {
      ++label;
    } else {
      return false;
    }
  }
  return true;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (extension == nullptr) return OpenSslError(absl::StrCat("make the extension ", value));
  const int added = X509_add_ext(cert, extension, -1);
  X509_EXTENSION_free(extension);
  return added == 1 ? absl::OkStatus() : OpenSslError("add an extension");
}

// A certificate for `key` named `common_name`, signed by `issuer_key` (itself when `issuer`
// is null).
absl::StatusOr<Cert> Sign(EVP_PKEY* key, const std::string& common_name, X509* issuer,
                          EVP_PKEY* issuer_key, int valid_days,
                          const std::vector<std::pair<int, std::string>>& extensions) {
  Cert cert(X509_new());
  if (cert == nullptr) return OpenSslError("allocate a certificate");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return OpenSslError("draw a serial number");
  serial[0] &= 0x7f;  // positive
  BIGNUM* number = BN_bin2bn(serial, sizeof(serial), nullptr);
  const bool serial_set =
      number != nullptr && BN_to_ASN1_INTEGER(number, X509_get_serialNumber(cert.get()));
  BN_free(number);
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (!serial_set || X509_set_version(cert.get(), 2) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), int64_t{valid_days} * 86400) == nullptr ||
      X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>("Tessera"), -1, -1,
                                 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                 -1, 0) != 1 ||
      X509_set_issuer_name(cert.get(),
                           X509_get_subject_name(issuer != nullptr ? issuer : cert.get())) != 1 ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return OpenSslError(absl::StrCat("fill in the certificate of ", common_name));
  }
  for (const auto& [nid, value] : extensions) {
    RETURN_IF_ERROR(AddExtension(cert.get(), issuer != nullptr ? issuer : cert.get(), nid, value));
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) {
    return OpenSslError(absl::StrCat("sign the certificate of ", common_name));
  }
  return cert;
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), cert) != 1)
    return OpenSslError("write a certificate");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, size);
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return OpenSslError("write a private key");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, size);
}

absl::StatusOr<Key> NewKey() {
  Key key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("make a P-256 key");
  return key;
}

// The CA of `dir`: loaded when ca.pem and ca.key exist, made otherwise.
absl::Status LoadOrMakeCa(const std::filesystem::path& dir, int valid_days, Cert* cert, Key* key) {
  const std::string cert_path = (dir / kCaFile).string();
  const std::string key_path = (dir / kCaKeyFile).string();
  if (std::filesystem::exists(cert_path) && std::filesystem::exists(key_path)) {
    ASSIGN_OR_RETURN(std::string cert_pem, ReadFileToString(cert_path));
    ASSIGN_OR_RETURN(std::string key_pem, ReadFileToString(key_path));
    Bio cert_bio(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
    Bio key_bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
    cert->reset(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
    key->reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
    if (*cert == nullptr || *key == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("'", cert_path, "' and '", key_path,
                                                     "' are not a PEM certificate and its key"));
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(*key, NewKey());
  ASSIGN_OR_RETURN(*cert, Sign(key->get(), "Tessera cluster CA", nullptr, key->get(), valid_days,
                               {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                {NID_subject_key_identifier, "hash"}}));
  ASSIGN_OR_RETURN(std::string key_pem, KeyPem(key->get()));
  ASSIGN_OR_RETURN(std::string cert_pem, CertPem(cert->get()));
  RETURN_IF_ERROR(WriteStringToFile(key_path, key_pem, kOwnerOnly));
  return WriteStringToFile(cert_path, cert_pem);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> MakeCertificates(const CertificateOptions& options) {
  if (options.hosts.empty())
    return absl::InvalidArgumentError("tessera certs: --hosts names no host");
  if (options.valid_days < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--days ", options.valid_days, " is not at least 1"));
  }
  for (const std::string& entry : options.hosts) {
    for (absl::string_view host : absl::StrSplit(entry, '+')) {
      if (!IsValidHost(std::string(host))) {
        return absl::InvalidArgumentError(
            absl::StrCat("host '", host, "' is not a DNS name or an IP address"));
      }
    }
  }
  const std::filesystem::path dir(options.dir);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    return absl::InternalError(
        absl::StrCat("cannot create '", options.dir, "': ", error.message()));
  Cert ca;
  Key ca_key;
  RETURN_IF_ERROR(LoadOrMakeCa(dir, options.valid_days, &ca, &ca_key));
  ASSIGN_OR_RETURN(std::string ca_pem, CertPem(ca.get()));
  std::vector<std::string> folders;
  for (const std::string& entry : options.hosts) {
    ASSIGN_OR_RETURN(Key key, NewKey());
    const std::vector<std::string> names = absl::StrSplit(entry, '+');
    const std::string& host = names.front();
    std::vector<std::string> alt_names;
    for (const std::string& name : names) {
      alt_names.push_back(absl::StrCat(IsIpAddress(name) ? "IP:" : "DNS:", name));
    }
    const std::string san = absl::StrJoin(alt_names, ",");
    ASSIGN_OR_RETURN(Cert cert, Sign(key.get(), host, ca.get(), ca_key.get(), options.valid_days,
                                     {{NID_basic_constraints, "critical,CA:FALSE"},
                                      {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
                                      {NID_ext_key_usage, "serverAuth,clientAuth"},
                                      {NID_subject_alt_name, san},
                                      {NID_authority_key_identifier, "keyid"}}));
    // Wildcards become '_' in the folder's name: "*.ps" -> "_.ps".
    std::string folder = host;
    for (char& c : folder) {
      if (c == '*' || c == '/') c = '_';
    }
    const std::filesystem::path host_dir = dir / folder;
    std::filesystem::create_directories(host_dir, error);
    if (error)
      return absl::InternalError(
          absl::StrCat("cannot create '", host_dir.string(), "': ", error.message()));
    ASSIGN_OR_RETURN(std::string key_pem, KeyPem(key.get()));
    ASSIGN_OR_RETURN(std::string cert_pem, CertPem(cert.get()));
    RETURN_IF_ERROR(WriteStringToFile((host_dir / kKeyFile).string(), key_pem, kOwnerOnly));
    RETURN_IF_ERROR(WriteStringToFile((host_dir / kCertFile).string(), cert_pem));
    RETURN_IF_ERROR(WriteStringToFile((host_dir / kCaFile).string(), ca_pem));
    folders.push_back(host_dir.string());
  }
  return folders;
}

}  // namespace tessera::rpc
