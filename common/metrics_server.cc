#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/process_setup.h"

namespace kestrel {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsServerOptions& options) {
  if (options.port == -1) return std::unique_ptr<MetricsServer>();
  if (options.port < -1 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port must be -1 (off), 0 (any free port) or in [1, 65535], got ", options.port));
  }
  if (options.io_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the metrics server's I/O timeout must be positive");
  }
  if (options.handler_threads < 1 || options.handler_threads > 64 || options.max_waiting < 0 ||
      options.max_waiting > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("the metrics server needs 1 to 64 handler threads and 0 to 4096 "
                                                   "waiting connections, got ", options.handler_threads, " and ",
                                                   options.max_waiting));
  }
  const std::string host(absl::StripSuffix(absl::StripPrefix(options.host, "["), "]"));
  const std::string address = absl::StrCat(absl::StrContains(host, ':') ? absl::StrCat("[", host, "]") : host, ":",
                                           options.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(options.port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", gai_strerror(rc)));
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->io_timeout_ = options.io_timeout;
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && server->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      error = std::strerror(errno);
      close(fd);
      continue;
    }
    server->listen_fd_ = fd;
  }
  freeaddrinfo(found);
  if (server->listen_fd_ < 0) return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", error));
  sockaddr_storage bound{};
  socklen_t bound_size = sizeof(bound);
  getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_size);
  server->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                    : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  server->stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (server->stop_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));

  // The thread inherits this thread's signal mask: block the asynchronous signals there, so that a SIGTERM always
  // reaches the process's own handling (WaitForShutdownSignal) whenever this server starts.
  sigset_t blocked, previous;
  sigfillset(&blocked);
  for (int synchronous : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT}) sigdelset(&blocked, synchronous);
  pthread_sigmask(SIG_BLOCK, &blocked, &previous);
  MetricsServer* raw = server.get();
  server->max_waiting_ = static_cast<size_t>(options.max_waiting);
  for (int h = 0; h < options.handler_threads; ++h) server->handlers_.emplace_back([raw] { raw->Handle(); });
  server->thread_ = std::thread([raw] { raw->Serve(); });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);

  KLOG(Info) << "serving Prometheus metrics on http://"
             << (absl::StrContains(host, ':') ? absl::StrCat("[", host, "]") : host) << ":" << server->port_
             << "/metrics";
  if (absl::Status written = WritePortFile(options.port_file, server->port_); !written.ok()) return written;
  return server;
}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    if (write(stop_fd_, &one, sizeof(one)) != sizeof(one)) KLOG(Error) << "cannot stop the metrics server";
    thread_.join();
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& h : handlers_) h.join();
  for (int connection : waiting_) close(connection);
  if (stop_fd_ >= 0) close(stop_fd_);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void MetricsServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      KLOG(Error) << "metrics server: poll: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int connection = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;  // the client went away, or out of descriptors: try again at the next poll
    absl::MutexLock lock(&mu_);
    if (waiting_.size() >= max_waiting_) {
      close(connection);  // every handler busy and the queue full: refuse rather than pile up descriptors
    } else {
      waiting_.push_back(connection);
    }
  }
}

void MetricsServer::Handle() {
  while (true) {
    int connection = -1;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](MetricsServer* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->stopping_ || !s->waiting_.empty(); },
          this));
      if (stopping_) return;
      connection = waiting_.front();
      waiting_.pop_front();
    }
    Answer(connection);
    close(connection);
  }
}

void MetricsServer::Answer(int connection) {
  // Every recv and send waits at most until the connection's deadline.
  const absl::Time deadline = absl::Now() + io_timeout_;
  auto time_out_at_deadline = [connection, deadline] {
    const timeval left = absl::ToTimeval(std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &left, sizeof(left));
    setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &left, sizeof(left));
  };
  // The request line and headers; the body (there is none for GET) is not read.
  constexpr size_t kMaxRequest = 16 << 10;
  std::string request;
  char buffer[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
    if (request.size() > kMaxRequest) break;
    if (absl::Now() >= deadline) return;
    time_out_at_deadline();
    const ssize_t n = recv(connection, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // closed or timed out before a whole request: nothing to answer
    request.append(buffer, static_cast<size_t>(n));
  }
  const std::vector<absl::string_view> words =
      absl::StrSplit(absl::string_view(request).substr(0, request.find_first_of("\r\n")), ' ', absl::SkipEmpty());
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  const bool head = !words.empty() && words[0] == "HEAD";
  if (words.size() != 3 || !absl::StartsWith(words[2], "HTTP/")) {
    status = "400 Bad Request";
  } else if (words[0] != "GET" && !head) {
    status = "405 Method Not Allowed";
  } else if (words[1].substr(0, words[1].find('?')) != "/metrics") {
    status = "404 Not Found";
  } else {
    body = MetricsText();
  }
  if (status != "200 OK") {
    type = "text/plain; charset=utf-8";
    body = absl::StrCat(status, ": serving GET /metrics only\n");
  }
  std::string answer = absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type, "\r\nContent-Length: ",
                                    body.size(), "\r\nConnection: close\r\n\r\n");
  if (!head) answer += body;
  for (size_t sent = 0; sent < answer.size();) {
    if (absl::Now() >= deadline) return;
    time_out_at_deadline();
    const ssize_t n = send(connection, answer.data() + sent, answer.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away or stalled past the timeout
    sent += static_cast<size_t>(n);
  }
}

}  // namespace kestrel
