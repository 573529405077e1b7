#include "common/metrics.h"
#include "common/metrics_server.h"
#include "common/rpc_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

std::unique_ptr<MetricsServer> StartOnFreePort(const std::string& port_file = "") {
  MetricsServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.port_file = port_file;
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  EXPECT_NE(*server, nullptr);
  return std::move(server).value();
}

Exposition Scrape(const MetricsServer& server) {
  absl::StatusOr<std::string> body = HttpGet("127.0.0.1", server.port(), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  if (!body.ok()) return {};
  absl::StatusOr<Exposition> parsed = ParseExposition(*body);
  EXPECT_TRUE(parsed.ok()) << parsed.status() << "\n" << *body;
  return parsed.ok() ? *std::move(parsed) : Exposition();
}

TEST(MetricsServerTest, ServesCountersGaugesAndHistogramsOverHttp) {
  const std::string port_file = TmpDir() + "/metrics_test.port";
  std::unique_ptr<MetricsServer> server = StartOnFreePort(port_file);
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  std::ifstream in(port_file);
  int written = 0;
  ASSERT_TRUE(in >> written) << port_file;
  EXPECT_EQ(written, server->port());

  NewCounter("kestrel_test_events_total", "Events seen by the test.", {{"kind", "a"}}).Increment(3);
  NewCounter("kestrel_test_events_total", "Events seen by the test.", {{"kind", "b"}}).Increment();
  NewGauge("kestrel_test_temperature_celsius", "A gauge with a \"quoted\" help text.").Set(-2.5);
  prometheus::Histogram& latency =
      NewHistogram("kestrel_test_latency_seconds", "Latency of test calls.", {0.1, 1}, {{"method", "Get"}});
  latency.Observe(0.05);
  latency.Observe(0.5);
  latency.Observe(7);

  const Exposition e = Scrape(*server);
  EXPECT_EQ(e.type.at("kestrel_test_events_total"), "counter");
  EXPECT_EQ(e.help.at("kestrel_test_events_total"), "Events seen by the test.");
  EXPECT_THAT(e.Value("kestrel_test_events_total", {{"kind", "a"}}), Optional(3.0));
  EXPECT_THAT(e.Value("kestrel_test_events_total", {{"kind", "b"}}), Optional(1.0));

  EXPECT_EQ(e.type.at("kestrel_test_temperature_celsius"), "gauge");
  EXPECT_EQ(e.help.at("kestrel_test_temperature_celsius"), "A gauge with a \"quoted\" help text.");
  EXPECT_THAT(e.Value("kestrel_test_temperature_celsius"), Optional(-2.5));

  EXPECT_EQ(e.type.at("kestrel_test_latency_seconds"), "histogram");
  EXPECT_EQ(e.help.at("kestrel_test_latency_seconds"), "Latency of test calls.");
  // Cumulative buckets, then +Inf, sum and count.
  EXPECT_THAT(e.Value("kestrel_test_latency_seconds_bucket", {{"method", "Get"}, {"le", "0.1"}}), Optional(1.0));
  EXPECT_THAT(e.Value("kestrel_test_latency_seconds_bucket", {{"method", "Get"}, {"le", "1"}}), Optional(2.0));
  EXPECT_THAT(e.Value("kestrel_test_latency_seconds_bucket", {{"method", "Get"}, {"le", "+Inf"}}), Optional(3.0));
  EXPECT_THAT(e.Value("kestrel_test_latency_seconds_count", {{"method", "Get"}}), Optional(3.0));
  EXPECT_THAT(e.Value("kestrel_test_latency_seconds_sum", {{"method", "Get"}}), Optional(7.55));

  // A second scrape sees later updates.
  NewCounter("kestrel_test_events_total", "Events seen by the test.", {{"kind", "a"}}).Increment();
  EXPECT_THAT(Scrape(*server).Value("kestrel_test_events_total", {{"kind", "a"}}), Optional(4.0));

  // Other paths are not served.
  absl::StatusOr<std::string> other = HttpGet("127.0.0.1", server->port(), "/other");
  EXPECT_FALSE(other.ok());
}

TEST(MetricsServerTest, PromtoolFindsNothingToComplainAbout) {
  if (access(kPromtoolPath, X_OK) != 0) {
    GTEST_SKIP() << kPromtoolPath << " is missing: install Debian's `prometheus` package (scripts/setup.sh does)";
  }
  std::unique_ptr<MetricsServer> server = StartOnFreePort();
  ASSERT_NE(server, nullptr);
  NewCounter("kestrel_test_lint_total", "Counted by the lint test.", {{"kind", "x"}}).Increment();
  NewGauge("kestrel_test_lint_bytes", "Bytes the lint test holds.").Set(1 << 20);
  NewHistogram("kestrel_test_lint_duration_seconds", "Time of the lint test.", RpcLatencyBuckets()).Observe(0.002);
  RpcMetrics rpc("kestrel_test_lint", "lint test");
  rpc.method("Get").Record(absl::StatusCode::kNotFound, 0.001);
  absl::StatusOr<std::string> body = HttpGet("127.0.0.1", server->port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("kestrel_test_lint_total"));
  absl::Status checked = PromtoolCheckMetrics(*body);
  EXPECT_TRUE(checked.ok()) << checked << "\n" << *body;

  // And promtool does complain about a badly named counter (the check is real).
  EXPECT_FALSE(PromtoolCheckMetrics("# HELP bad A counter.\n# TYPE bad counter\nbad 1\n").ok());
}

TEST(MetricsServerTest, OffByDefault) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(MetricsServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(*server, nullptr);
}

TEST(MetricsServerTest, RefusesBadOptionsAndBusyPorts) {
  MetricsServerOptions options;
  options.port = 70000;
  EXPECT_TRUE(absl::IsInvalidArgument(MetricsServer::Start(options).status()));
  options.port = -2;
  EXPECT_TRUE(absl::IsInvalidArgument(MetricsServer::Start(options).status()));
  options.port = 0;
  options.io_timeout = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(MetricsServer::Start(options).status()));

  std::unique_ptr<MetricsServer> first = StartOnFreePort();
  ASSERT_NE(first, nullptr);
  MetricsServerOptions busy;
  busy.host = "127.0.0.1";
  busy.port = first->port();
  absl::StatusOr<std::unique_ptr<MetricsServer>> second = MetricsServer::Start(busy);
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat(first->port())));
}

TEST(MetricsServerTest, UnwritablePortFileIsAnError) {
  MetricsServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.port_file = TmpDir() + "/no/such/dir/metrics.port";
  EXPECT_FALSE(MetricsServer::Start(options).ok());
}

TEST(MetricsServerTest, AStalledClientHoldsTheServerForOneTimeoutAtMost) {
  MetricsServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.io_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  // A client that connects and sends half a request, then nothing.
  const int stalled = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(stalled, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(send(stalled, "GET /met", 8, 0), 8);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> body = HttpGet("127.0.0.1", (*server)->port(), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  close(stalled);
}

// Idle connections (one short of every handler) do not hold up a scrape: others answer it at once, long before
// the idle ones time out. A single-threaded server would keep the scrape waiting for all of them.
TEST(MetricsServerTest, IdleConnectionsDoNotBlockScrapes) {
  MetricsServerOptions options;
  EXPECT_EQ(options.host, "127.0.0.1") << "loopback by default";
  options.port = 0;
  options.io_timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> idle;
  for (int i = 0; i + 1 < options.handler_threads; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>((*server)->port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    idle.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(200));  // let the handlers pick the idle ones up
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> body = HttpGet("127.0.0.1", (*server)->port(), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "the scrape waited for idle connections";
  for (int fd : idle) close(fd);
  options.handler_threads = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(MetricsServer::Start(options).status()));
}

TEST(ScrapeHookTest, RunsBeforeEveryScrapeUntilReset) {
  std::unique_ptr<MetricsServer> server = StartOnFreePort();
  ASSERT_NE(server, nullptr);
  prometheus::Gauge& gauge = NewGauge("kestrel_test_refreshed", "Set by a scrape hook.");
  int runs = 0;
  ScrapeHook hook([&] { gauge.Set(++runs); });
  EXPECT_THAT(Scrape(*server).Value("kestrel_test_refreshed"), Optional(1.0));
  EXPECT_THAT(Scrape(*server).Value("kestrel_test_refreshed"), Optional(2.0));
  EXPECT_THAT(ParseExposition(MetricsText())->Value("kestrel_test_refreshed"), Optional(3.0));

  ScrapeHook moved = std::move(hook);  // the registration moves with it
  EXPECT_THAT(Scrape(*server).Value("kestrel_test_refreshed"), Optional(4.0));
  moved.Reset();
  EXPECT_THAT(Scrape(*server).Value("kestrel_test_refreshed"), Optional(4.0));
  EXPECT_EQ(runs, 4);
}

TEST(RpcMetricsTest, CountsCallsByMethodAndCodeAndTimesThem) {
  RpcMetrics rpc("kestrel_test_rpc", "test service");
  RpcMetrics::Method& get = rpc.method("Get");
  EXPECT_EQ(&get, &rpc.method("Get"));
  RpcMetrics::Method& put = rpc.method("Put");

  absl::StatusOr<Exposition> before = ParseExposition(MetricsText());
  ASSERT_TRUE(before.ok()) << before.status();
  // Every method's OK series exists from the start, at zero.
  EXPECT_THAT(before->Value("kestrel_test_rpc_requests_total", {{"method", "Put"}, {"code", "OK"}}), Optional(0.0));

  get.Begin().End(absl::OkStatus());
  get.Begin().End(absl::OkStatus());
  get.Begin().End(absl::InvalidArgumentError("bad key"));
  put.Record(absl::StatusCode::kUnavailable, 0.25);
  put.Record(static_cast<absl::StatusCode>(99), 0.001);  // not a canonical code: counted as UNKNOWN

  absl::StatusOr<Exposition> e = ParseExposition(MetricsText());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->type.at("kestrel_test_rpc_requests_total"), "counter");
  EXPECT_EQ(e->type.at("kestrel_test_rpc_request_duration_seconds"), "histogram");
  EXPECT_THAT(e->Value("kestrel_test_rpc_requests_total", {{"method", "Get"}, {"code", "OK"}}), Optional(2.0));
  EXPECT_THAT(e->Value("kestrel_test_rpc_requests_total", {{"method", "Get"}, {"code", "INVALID_ARGUMENT"}}),
              Optional(1.0));
  EXPECT_THAT(e->Value("kestrel_test_rpc_requests_total", {{"method", "Put"}, {"code", "UNAVAILABLE"}}),
              Optional(1.0));
  EXPECT_THAT(e->Value("kestrel_test_rpc_requests_total", {{"method", "Put"}, {"code", "UNKNOWN"}}), Optional(1.0));
  EXPECT_THAT(e->Value("kestrel_test_rpc_request_duration_seconds_count", {{"method", "Get"}}), Optional(3.0));
  EXPECT_THAT(e->Value("kestrel_test_rpc_request_duration_seconds_count", {{"method", "Put"}}), Optional(2.0));
  EXPECT_THAT(e->Value("kestrel_test_rpc_request_duration_seconds_bucket", {{"method", "Put"}, {"le", "0.25"}}),
              Optional(2.0));
  EXPECT_THAT(e->Value("kestrel_test_rpc_request_duration_seconds_bucket", {{"method", "Put"}, {"le", "0.1"}}),
              Optional(1.0));
}

TEST(MetricsTest, AdvanceCounterToNeverLowers) {
  prometheus::Counter& counter = NewCounter("kestrel_test_mirrored_total", "Mirrors a cumulative count.");
  AdvanceCounterTo(counter, 5);
  EXPECT_EQ(counter.Value(), 5);
  AdvanceCounterTo(counter, 3);
  EXPECT_EQ(counter.Value(), 5);
  AdvanceCounterTo(counter, 12);
  EXPECT_EQ(counter.Value(), 12);
}

TEST(MetricsTest, DeclaringTwiceReturnsTheSameMetric) {
  prometheus::Gauge& a = NewGauge("kestrel_test_twice", "Declared twice.", {{"x", "1"}});
  prometheus::Gauge& b = NewGauge("kestrel_test_twice", "Declared twice.", {{"x", "1"}});
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(&GaugeFamily("kestrel_test_twice", "Declared twice."),
            &GaugeFamily("kestrel_test_twice", "Declared twice."));
}

TEST(ExpositionTest, RejectsMalformedText) {
  EXPECT_FALSE(ParseExposition("untyped_sample 1\n").ok());
  EXPECT_FALSE(ParseExposition("# TYPE a gauge\na{b=\"1\" 2\n").ok());
  EXPECT_FALSE(ParseExposition("# TYPE a gauge\na one\n").ok());
  EXPECT_FALSE(ParseExposition("# TYPE a gauge\na 1\na 2\n").ok());
  absl::StatusOr<Exposition> ok = ParseExposition("# TYPE a gauge\na{b=\"x\\\"y\",c=\"\"} 1 1700000000000\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(ok->Value("a", {{"b", "x\"y"}, {"c", ""}}), Optional(1.0));
}

}  // namespace
}  // namespace kestrel
