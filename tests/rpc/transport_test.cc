// rpc/server.h and rpc/channel.h against each other on loopback, with real certificates
// (rpc/certificates.h) and a real service: which combinations of TLS, token and address
// connect, which are refused, and what the refusals say.
#include <sys/stat.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "rpc/address.h"
#include "rpc/certificates.h"
#include "rpc/channel.h"
#include "rpc/server.h"
#include "rpc/token_auth.h"
#include "rpc/transport_security.h"

namespace tessera::rpc {
namespace {

using ::tessera::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::Not;

// Answers every method with the request's bytes.
class EchoService : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      Reactor() { StartRead(&message_); }
      void OnReadDone(bool ok) override {
        if (!ok) return Finish(grpc::Status::OK);
        StartWrite(&message_);
      }
      void OnWriteDone(bool) override { StartRead(&message_); }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer message_;
    };
    return new Reactor;
  }
};

constexpr char kEcho[] = "/tessera.test.Echo/Call";
constexpr char kHealth[] = "/grpc.health.v1.Health/Check";

// One unary call; its status.
grpc::Status Call(const std::shared_ptr<grpc::Channel>& channel, const std::string& method) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  // A health check's request, HealthCheckRequest{}, encodes as no bytes.
  grpc::Slice slice(method == kHealth ? std::string() : std::string("ping"));
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer reply;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status result;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu);
    result = std::move(status);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return result;
}

class TransportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(::testing::TempDir(), "/transport_test_certs"));
    std::filesystem::remove_all(*dir_);
    ASSERT_THAT(MakeCertificates({.dir = *dir_, .hosts = {"127.0.0.1", "client"}}), IsOk());
    ASSERT_THAT(MakeCertificates({.dir = *dir_ + "/other", .hosts = {"127.0.0.1"}}), IsOk());
  }

  static TransportSecurity Tls(const std::string& folder, std::string token = "") {
    absl::StatusOr<TransportSecurity> s = LoadTransportSecurity({.tls_dir = *dir_ + "/" + folder});
    EXPECT_THAT(s, IsOk());
    s->token = std::move(token);
    return *s;
  }

  static std::shared_ptr<grpc::Channel> Dial(const std::string& target,
                                             TransportSecurity security) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        NewChannel({.target = target, .security = std::move(security)});
    EXPECT_THAT(channel, IsOk());
    return *channel;
  }

  static std::string* dir_;
};

std::string* TransportTest::dir_ = nullptr;

// The echo service behind StartServer.
class EchoServer {
 public:
  static absl::StatusOr<std::unique_ptr<EchoServer>> Start(const std::string& address,
                                                           TransportSecurity security) {
    auto echo = std::unique_ptr<EchoServer>(new EchoServer);
    ASSIGN_OR_RETURN(RunningServer running, StartServer({.name = "echo server",
                                                         .address = address,
                                                         .security = std::move(security),
                                                         .generic_service = &echo->service_}));
    echo->server_ = std::move(running.server);
    echo->address_ = running.address;
    echo->listening_ = running.listening;
    return echo;
  }
  ~EchoServer() {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }
  const std::string& address() const { return address_; }
  const std::string& listening() const { return listening_; }

 private:
  EchoService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_, listening_;
};

TEST_F(TransportTest, LoopbackWithoutTlsOrTokenServesThisMachine) {
  auto server = EchoServer::Start("127.0.0.1:0", {});
  ASSERT_THAT(server, IsOk());
  EXPECT_TRUE(Call(Dial((*server)->address(), {}), kEcho).ok());
}

TEST_F(TransportTest, ATokenIsCheckedOnEveryCallButHealthChecks) {
  auto server = EchoServer::Start("127.0.0.1:0", {.token = "s3cret"});
  ASSERT_THAT(server, IsOk());
  const std::string& address = (*server)->address();
  EXPECT_TRUE(Call(Dial(address, {.token = "s3cret"}), kEcho).ok());

  const grpc::Status missing = Call(Dial(address, {}), kEcho);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(missing.error_message(), HasSubstr("no cluster token"));

  const grpc::Status wrong = Call(Dial(address, {.token = "s3cres"}), kEcho);
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(wrong.error_message(), HasSubstr("wrong cluster token"));
  EXPECT_THAT(wrong.error_message(), Not(HasSubstr("s3cre")));

  // Kubernetes' probes carry no token.
  EXPECT_TRUE(Call(Dial(address, {}), kHealth).ok());
}

TEST_F(TransportTest, TlsWithATokenConnectsClientsOfTheSameCa) {
  auto server = EchoServer::Start("127.0.0.1:0", Tls("127.0.0.1", "t"));
  ASSERT_THAT(server, IsOk());
  const std::string& address = (*server)->address();
  EXPECT_TRUE(Call(Dial(address, Tls("client", "t")), kEcho).ok());
  EXPECT_EQ(Call(Dial(address, Tls("client")), kEcho).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  // A client trusting another CA cannot complete the handshake, and says so.
  // Waiting would not mend that, so the wait ends at once.
  std::shared_ptr<grpc::Channel> stranger = Dial(address, Tls("other/127.0.0.1", "t"));
  const absl::Time start = absl::Now();
  const absl::Status reached = WaitUntilConnected(*stranger, "echo server", absl::Seconds(60));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(reached.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(reached.message(), HasSubstr("echo server: TLS handshake failed"));
  EXPECT_THAT(std::string(reached.message()), HasSubstr("certificate verify failed"));
  EXPECT_FALSE(Call(stranger, kEcho).ok());

  // Plaintext to a TLS server gets nowhere either, and is told why.
  std::shared_ptr<grpc::Channel> plaintext = Dial(address, {.token = "t"});
  EXPECT_FALSE(Call(plaintext, kEcho).ok());
  const absl::Status unsecured = WaitUntilConnected(*plaintext, "echo server", absl::Seconds(60));
  EXPECT_THAT(std::string(unsecured.message()),
              HasSubstr("does one end use TLS (--tls_dir) and the other not?"));
}

TEST_F(TransportTest, MutualTlsRefusesClientsWithoutACertificateOfTheCa) {
  TransportSecurity security = Tls("127.0.0.1", "t");
  security.require_client_cert = true;
  auto server = EchoServer::Start("127.0.0.1:0", security);
  ASSERT_THAT(server, IsOk());
  const std::string& address = (*server)->address();
  EXPECT_TRUE(Call(Dial(address, Tls("client", "t")), kEcho).ok());

  TransportSecurity no_cert = Tls("client", "t");
  no_cert.cert_pem.clear();
  no_cert.key_pem.clear();
  EXPECT_FALSE(Call(Dial(address, no_cert), kEcho).ok());

  // A certificate of another CA, with this cluster's CA to check the server.
  TransportSecurity foreign = Tls("other/127.0.0.1", "t");
  foreign.ca_pem = Tls("client").ca_pem;
  EXPECT_FALSE(Call(Dial(address, foreign), kEcho).ok());
}

TEST_F(TransportTest, BeyondLoopbackTlsAndATokenAreRequiredUnlessInsecure) {
  for (const char* address : {"0.0.0.0:0", "[::]:0", ":0"}) {
    SCOPED_TRACE(address);
    auto plain = EchoServer::Start(address, {.token = "t"});
    EXPECT_EQ(plain.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(plain.status().message(), HasSubstr("echo server: will not serve"));
    EXPECT_THAT(plain.status().message(), HasSubstr("tessera certs"));
    EXPECT_THAT(plain.status().message(), HasSubstr("--token_file"));

    auto no_token = EchoServer::Start(address, Tls("127.0.0.1"));
    EXPECT_EQ(no_token.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(no_token.status().message(), HasSubstr("without a cluster token"));
  }
  auto secured = EchoServer::Start("0.0.0.0:0", Tls("127.0.0.1", "t"));
  ASSERT_THAT(secured, IsOk());
  EXPECT_EQ((*secured)->address().substr(0, 10), "127.0.0.1:");
  // Logs say where it listens, not where this machine dials it.
  EXPECT_EQ((*secured)->listening(),
            "0.0.0.0:" + (*secured)->address().substr(std::string("127.0.0.1:").size()));
  EXPECT_TRUE(Call(Dial((*secured)->address(), Tls("client", "t")), kEcho).ok());

  auto insecure = EchoServer::Start("0.0.0.0:0", {.insecure = true});
  ASSERT_THAT(insecure, IsOk());
  EXPECT_TRUE(Call(Dial((*insecure)->address(), {.insecure = true}), kEcho).ok());
}

TEST_F(TransportTest, ChannelsBeyondLoopbackNeedTlsOrInsecure) {
  auto plain = NewChannel({.target = "10.1.2.3:9000", .security = {.token = "t"}});
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(plain.status().message(), HasSubstr("will not dial 10.1.2.3:9000 in plaintext"));
  EXPECT_THAT(NewChannel({.target = "10.1.2.3:9000", .security = Tls("client", "t")}), IsOk());
  EXPECT_THAT(NewChannel({.target = "10.1.2.3:9000", .security = {.insecure = true}}), IsOk());
}

TEST_F(TransportTest, UnreachableTargetsAreNamedWithTheReason) {
  // A port nobody listens on: bind one and close it.
  auto server = EchoServer::Start("127.0.0.1:0", {});
  ASSERT_THAT(server, IsOk());
  const std::string address = (*server)->address();
  server->reset();
  const absl::Status status =
      WaitUntilConnected(*Dial(address, {}), "worker 3", absl::Milliseconds(300));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("worker 3: not reachable within 300ms"));
}

TEST_F(TransportTest, UnixSocketsServeThisMachineAndCheckTheToken) {
  // A folder of its own under /tmp: the test's TempDir may exceed a socket path's bound.
  std::string folder = "/tmp/tessera-transport-test-XXXXXX";
  ASSERT_NE(mkdtemp(folder.data()), nullptr);
  const std::string address = "unix:" + folder + "/echo.sock";
  {
    // TLS settings change nothing on a Unix socket, on either end.
    auto server = EchoServer::Start(address, Tls("127.0.0.1", "t"));
    ASSERT_THAT(server, IsOk());
    EXPECT_EQ((*server)->address(), address);
    EXPECT_EQ((*server)->listening(), address);
    EXPECT_TRUE(std::filesystem::exists(folder + "/echo.sock"));
    EXPECT_TRUE(Call(Dial(address, {.token = "t"}), kEcho).ok());
    EXPECT_TRUE(Call(Dial(address, Tls("client", "t")), kEcho).ok());
    const grpc::Status missing = Call(Dial(address, {}), kEcho);
    EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(missing.error_message(), HasSubstr("no cluster token"));
  }
  const absl::Status gone =
      WaitUntilConnected(*Dial(address, {.token = "t"}), "worker 0", absl::Milliseconds(300));
  EXPECT_EQ(gone.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(gone.message(), HasSubstr("worker 0"));
  std::filesystem::remove_all(folder);
}

TEST(AddressTest, LoopbackHostsAreThoseOfThisMachineOnly) {
  for (const char* host : {"localhost", "LocalHost", "127.0.0.1", "127.3.2.1", "::1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"", "0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "tessera-ps-0.tessera-ps",
                           "localhost.example.com", "::ffff:10.0.0.1"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
  EXPECT_EQ(HostOf("10.0.0.2:9000"), "10.0.0.2");
  EXPECT_EQ(HostOf("[::1]:9000"), "::1");
  EXPECT_EQ(HostOf(":9000"), "");
  EXPECT_EQ(HostOf("ps-0.ps:9000"), "ps-0.ps");
  EXPECT_EQ(HostOf("::1"), "::1");
}

TEST(AddressTest, UnixSocketsAreThoseWithAPath) {
  EXPECT_TRUE(IsUnixSocketAddress("unix:/tmp/x/ps-0.sock"));
  EXPECT_TRUE(IsUnixSocketAddress("unix:///tmp/x/ps-0.sock"));
  // An abstract socket has no file to guard it: any process of the machine reaches it.
  EXPECT_FALSE(IsUnixSocketAddress("unix-abstract:tessera"));
  EXPECT_FALSE(IsUnixSocketAddress("127.0.0.1:9000"));
  EXPECT_FALSE(IsUnixSocketAddress("unixhost:9000"));
}

TEST(TokenTest, TokensCompareByContent) {
  EXPECT_TRUE(TokensEqual("abc", "abc"));
  EXPECT_FALSE(TokensEqual("abc", "abd"));
  EXPECT_FALSE(TokensEqual("abc", "abcd"));
  EXPECT_FALSE(TokensEqual("", "abc"));
  auto a = NewToken();
  auto b = NewToken();
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
}

TEST(TransportSecurityTest, LoadsFoldersAndTokenFilesAndNamesWhatIsWrong) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/transport_security_test");
  std::filesystem::remove_all(dir);
  ASSERT_THAT(MakeCertificates({.dir = dir, .hosts = {"h"}}), IsOk());
  ASSERT_THAT(WriteStringToFile(dir + "/token", "  tok3n\n"), IsOk());
  auto loaded =
      LoadTransportSecurity({.tls_dir = dir + "/h", .token_file = dir + "/token", .mtls = true});
  ASSERT_THAT(loaded, IsOk());
  EXPECT_TRUE(loaded->tls());
  EXPECT_THAT(loaded->cert_pem, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_THAT(loaded->key_pem, HasSubstr("PRIVATE KEY"));
  EXPECT_EQ(loaded->token, "tok3n");
  EXPECT_TRUE(loaded->require_client_cert);

  // The environment stands in for flags that are not given.
  setenv("TESSERA_TOKEN_FILE", (dir + "/token").c_str(), 1);
  auto from_env = LoadTransportSecurity({});
  unsetenv("TESSERA_TOKEN_FILE");
  ASSERT_THAT(from_env, IsOk());
  EXPECT_EQ(from_env->token, "tok3n");
  EXPECT_FALSE(from_env->tls());

  auto no_ca = LoadTransportSecurity({.tls_dir = dir + "/missing"});
  EXPECT_EQ(no_ca.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_ca.status().message(), HasSubstr("--tls_dir"));
  EXPECT_THAT(no_ca.status().message(), HasSubstr("missing/ca.pem"));

  std::filesystem::remove(dir + "/h/key.pem");
  auto half = LoadTransportSecurity({.tls_dir = dir + "/h"});
  EXPECT_THAT(half.status().message(), HasSubstr("holds cert.pem without key.pem"));

  auto mtls_without_tls = LoadTransportSecurity({.mtls = true});
  EXPECT_THAT(mtls_without_tls.status().message(), HasSubstr("--mtls needs --tls_dir"));

  ASSERT_THAT(WriteStringToFile(dir + "/empty", "\n"), IsOk());
  auto empty = LoadTransportSecurity({.token_file = dir + "/empty"});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("is empty"));
}

}  // namespace
}  // namespace tessera::rpc
