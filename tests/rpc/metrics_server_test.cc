// rpc/metrics_server.h against libcurl on loopback, with real
// certificates: what a scrape gets with and without TLS, token and client certificate, and
// which configurations are refused before anything binds.
#include "rpc/metrics_server.h"

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/metrics.h"
#include "core/status_matchers.h"
#include "curl/curl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ndarray/runtime.h"
#include "ndarray/runtime_metrics.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "rpc/certificates.h"
#include "rpc/transport_security.h"

namespace tessera::rpc {
namespace {

using ::tessera::testing::IsOk;
using ::tessera::testing::IsOkAndHolds;
using ::tessera::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

struct Response {
  long status = 0;  // 0: no HTTP response (the connection or the TLS handshake failed)
  std::string body;
  std::string error;
};

struct Request {
  int port = 0;
  std::string method = "GET";
  std::string authorization;  // the header's value; empty: none
  bool tls = false;
  std::string ca_file;     // TLS: the CA to check the server with
  std::string client_dir;  // TLS: a folder with this client's cert.pem and key.pem
};

// One request with libcurl, as a scraper would make it.
Response Get(const Request& request) {
  Response response;
  CURL* curl = curl_easy_init();
  const std::string url =
      absl::StrCat(request.tls ? "https" : "http", "://127.0.0.1:", request.port, "/metrics");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
  curl_slist* headers = nullptr;
  const std::string authorization = absl::StrCat("Authorization: ", request.authorization);
  if (!request.authorization.empty()) headers = curl_slist_append(headers, authorization.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  const std::string cert = request.client_dir + "/cert.pem";
  const std::string key = request.client_dir + "/key.pem";
  if (request.tls) {
    curl_easy_setopt(curl, CURLOPT_CAINFO, request.ca_file.c_str());
    if (!request.client_dir.empty()) {
      curl_easy_setopt(curl, CURLOPT_SSLCERT, cert.c_str());
      curl_easy_setopt(curl, CURLOPT_SSLKEY, key.c_str());
    }
  }
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char* data, size_t size, size_t count, void* body) {
        static_cast<std::string*>(body)->append(data, size * count);
        return size * count;
      });
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  if (CURLcode code = curl_easy_perform(curl); code != CURLE_OK) {
    response.error = curl_easy_strerror(code);
  } else {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return response;
}

class MetricsServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    dir_ = new std::string(absl::StrCat(::testing::TempDir(), "/metrics_server_test_certs"));
    std::filesystem::remove_all(*dir_);
    ASSERT_THAT(MakeCertificates({.dir = *dir_, .hosts = {"127.0.0.1", "scraper"}}), IsOk());
  }

  static TransportSecurity Tls(std::string token = "", bool mtls = false) {
    absl::StatusOr<TransportSecurity> s =
        LoadTransportSecurity({.tls_dir = *dir_ + "/127.0.0.1", .mtls = mtls});
    EXPECT_THAT(s, IsOk());
    s->token = std::move(token);
    return *s;
  }
  static std::string CaFile() { return *dir_ + "/127.0.0.1/ca.pem"; }
  static std::string ClientDir() { return *dir_ + "/scraper"; }

  absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address,
                                                       TransportSecurity security) {
    return MetricsServer::Start({.name = "test metrics",
                                 .address = address,
                                 .security = std::move(security),
                                 .collectables = {&registry_}});
  }

  void SetUp() override {
    prometheus::BuildCounter()
        .Name("tessera_test_events_total")
        .Help("events")
        .Register(registry_)
        .Add({{"kind", "scrape"}})
        .Increment(3);
  }

  static std::string* dir_;
  prometheus::Registry registry_;
};

std::string* MetricsServerTest::dir_ = nullptr;

TEST_F(MetricsServerTest, LoopbackServesTheCollectablesInTextFormat) {
  auto server = Start("127.0.0.1:0", {});
  ASSERT_THAT(server, IsOk());
  EXPECT_FALSE((*server)->tls());
  EXPECT_EQ((*server)->listening(), absl::StrCat("127.0.0.1:", (*server)->port()));
  const Response response = Get({.port = (*server)->port()});
  EXPECT_EQ(response.status, 200) << response.error;
  EXPECT_THAT(response.body, HasSubstr("# TYPE tessera_test_events_total counter"));
  EXPECT_THAT(response.body, HasSubstr("tessera_test_events_total{kind=\"scrape\"} 3"));
}

TEST_F(MetricsServerTest, OnlyGetOfMetricsIsAnswered) {
  auto server = Start("127.0.0.1:0", {});
  ASSERT_THAT(server, IsOk());
  EXPECT_EQ(Get({.port = (*server)->port(), .method = "POST"}).status, 405);
  EXPECT_EQ(Get({.port = (*server)->port(), .method = "DELETE"}).status, 405);
}

TEST_F(MetricsServerTest, TokenIsRequiredAsBearer) {
  auto server = Start("127.0.0.1:0", {.token = "s3cret"});
  ASSERT_THAT(server, IsOk());
  const int port = (*server)->port();
  EXPECT_EQ(Get({.port = port}).status, 401);
  EXPECT_EQ(Get({.port = port, .authorization = "Bearer wrong"}).status, 401);
  EXPECT_EQ(Get({.port = port, .authorization = "Bearer s3cre"}).status, 401);
  EXPECT_EQ(Get({.port = port, .authorization = "Basic s3cret"}).status, 401);
  const Response ok = Get({.port = port, .authorization = "Bearer s3cret"});
  EXPECT_EQ(ok.status, 200) << ok.error;
  EXPECT_THAT(ok.body, HasSubstr("tessera_test_events_total"));
  EXPECT_THAT(Get({.port = port}).body, Not(HasSubstr("s3cret")));
}

TEST_F(MetricsServerTest, TlsServesHttpsCheckedAgainstTheClusterCa) {
  auto server = Start("127.0.0.1:0", Tls("s3cret"));
  ASSERT_THAT(server, IsOk());
  EXPECT_TRUE((*server)->tls());
  const int port = (*server)->port();
  const Response ok =
      Get({.port = port, .authorization = "Bearer s3cret", .tls = true, .ca_file = CaFile()});
  EXPECT_EQ(ok.status, 200) << ok.error;
  EXPECT_THAT(ok.body, HasSubstr("tessera_test_events_total{kind=\"scrape\"} 3"));
  EXPECT_EQ(Get({.port = port, .tls = true, .ca_file = CaFile()}).status, 401);
  // Plain HTTP to the TLS port gets no metrics.
  EXPECT_NE(Get({.port = port, .authorization = "Bearer s3cret"}).status, 200);
}

TEST_F(MetricsServerTest, MutualTlsRefusesScrapersWithoutACertificate) {
  auto server = Start("127.0.0.1:0", Tls("s3cret", /*mtls=*/true));
  ASSERT_THAT(server, IsOk());
  const int port = (*server)->port();
  const Response refused =
      Get({.port = port, .authorization = "Bearer s3cret", .tls = true, .ca_file = CaFile()});
  EXPECT_EQ(refused.status, 401);
  EXPECT_THAT(refused.body, HasSubstr("needs a client certificate"));
  const Response ok = Get({.port = port,
                           .authorization = "Bearer s3cret",
                           .tls = true,
                           .ca_file = CaFile(),
                           .client_dir = ClientDir()});
  EXPECT_EQ(ok.status, 200) << ok.error;
}

TEST_F(MetricsServerTest, BeyondLoopbackNeedsTlsAndAToken) {
  EXPECT_THAT(Start("0.0.0.0:0", {}),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("test metrics: will not serve 0.0.0.0:0")));
  EXPECT_THAT(Start("0.0.0.0:0", {.token = "s3cret"}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("without TLS")));
  EXPECT_THAT(Start("0.0.0.0:0", Tls()),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("without a cluster token")));
  auto secured = Start("0.0.0.0:0", Tls("s3cret"));
  ASSERT_THAT(secured, IsOk());
  EXPECT_EQ((*secured)->listening(), absl::StrCat("0.0.0.0:", (*secured)->port()));
  EXPECT_THAT(Start("0.0.0.0:0", {.insecure = true}), IsOk());
}

TEST_F(MetricsServerTest, AnAddressItCannotBindIsAnErrorNamingIt) {
  auto first = Start("127.0.0.1:0", {});
  ASSERT_THAT(first, IsOk());
  const std::string taken = absl::StrCat("127.0.0.1:", (*first)->port());
  EXPECT_THAT(Start(taken, {}), StatusIs(absl::StatusCode::kUnavailable,
                                         HasSubstr(absl::StrCat("cannot serve ", taken))));
  EXPECT_THAT(Start("127.0.0.1", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has no port")));
  EXPECT_THAT(Start("no-such-host.invalid:0", {.insecure = true}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no-such-host.invalid")));
  EXPECT_THAT(Start("unix:/tmp/metrics.sock", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("serves host:port only")));
}

TEST(RuntimeMetricsTest, ReportsPendingFunctionsAndMemoryPerDevice) {
  absl::StatusOr<std::unique_ptr<OwnedRuntime>> runtime = OwnedRuntime::Create();
  ASSERT_THAT(runtime, IsOk());
  const Runtime& rt = (*runtime)->get();
  absl::StatusOr<engine::StorageHandle> block = rt.storage->Alloc(1000, Context::CPU());
  ASSERT_THAT(block, IsOk());
  RuntimeMetrics metrics(rt);
  EXPECT_THAT(MetricValue(metrics, "tessera_memory_in_use_bytes", {{"device", "cpu(0)"}}),
              IsOkAndHolds(1024.0));
  EXPECT_THAT(MetricValue(metrics, "tessera_engine_pending_functions"), IsOkAndHolds(0.0));
  rt.storage->Free(*block);
  EXPECT_THAT(MetricValue(metrics, "tessera_memory_in_use_bytes", {{"device", "cpu(0)"}}),
              IsOkAndHolds(0.0));
  EXPECT_THAT(MetricValue(metrics, "tessera_memory_pooled_bytes", {{"device", "cpu(0)"}}),
              IsOkAndHolds(1024.0));
  EXPECT_THAT(MetricValue(metrics, "tessera_memory_in_use_bytes", {{"device", "gpu(0)"}}),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace tessera::rpc
