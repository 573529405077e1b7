#include "common/metrics_testing.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kestrel {
namespace {

bool IsNameStart(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || absl::ascii_isdigit(static_cast<unsigned char>(c)); }

// Reads a metric or label name at the front of `*s`.
bool ConsumeName(absl::string_view* s, std::string* name) {
  if (s->empty() || !IsNameStart(s->front())) return false;
  size_t n = 1;
  while (n < s->size() && IsNameChar((*s)[n])) ++n;
  *name = std::string(s->substr(0, n));
  s->remove_prefix(n);
  return true;
}

// Reads a quoted label value (escapes \\, \" and \n) at the front of `*s`.
bool ConsumeQuoted(absl::string_view* s, std::string* value) {
  if (!absl::ConsumePrefix(s, "\"")) return false;
  value->clear();
  while (!s->empty()) {
    const char c = s->front();
    s->remove_prefix(1);
    if (c == '"') return true;
    if (c == '\\') {
      if (s->empty()) return false;
      const char e = s->front();
      s->remove_prefix(1);
      if (e == 'n') {
        value->push_back('\n');
      } else if (e == '\\' || e == '"') {
        value->push_back(e);
      } else {
        return false;
      }
    } else {
      value->push_back(c);
    }
  }
  return false;
}

bool ParseValue(absl::string_view text, double* value) {
  if (text == "+Inf" || text == "Inf") {
    *value = std::numeric_limits<double>::infinity();
  } else if (text == "-Inf") {
    *value = -std::numeric_limits<double>::infinity();
  } else if (text == "NaN") {
    *value = std::numeric_limits<double>::quiet_NaN();
  } else {
    return absl::SimpleAtod(text, value);
  }
  return true;
}

std::string Unescape(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && (text[i + 1] == 'n' || text[i + 1] == '\\')) {
      out.push_back(text[i + 1] == 'n' ? '\n' : '\\');
      ++i;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path,
                                    absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    timeval tv = absl::ToTimeval(timeout);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot connect to ", host, ":", port));

  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, ":", port, "\r\nConnection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError(absl::StrCat("sending to ", host, ":", port, ": ", std::strerror(errno)));
    }
    sent += static_cast<size_t>(n);
  }
  std::string answer;
  char buffer[16384];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      close(fd);
      return absl::DeadlineExceededError(absl::StrCat("reading from ", host, ":", port, ": ", std::strerror(errno)));
    }
    answer.append(buffer, static_cast<size_t>(n));
  }
  close(fd);

  const size_t header_end = answer.find("\r\n\r\n");
  if (header_end == std::string::npos) {
    return absl::DataLossError(absl::StrCat("no complete HTTP header from ", host, ":", port));
  }
  const std::string status_line = answer.substr(0, answer.find("\r\n"));
  const std::vector<absl::string_view> status = absl::StrSplit(status_line, ' ');
  if (status.size() < 2 || !absl::StartsWith(status[0], "HTTP/") || status[1] != "200") {
    return absl::FailedPreconditionError(absl::StrCat("GET ", path, " answered '", status_line, "'"));
  }
  return answer.substr(header_end + 4);
}

std::string Exposition::Key(const std::string& name, const std::map<std::string, std::string>& labels) {
  if (labels.empty()) return name;
  std::vector<std::string> parts;
  for (const auto& [label, value] : labels) parts.push_back(absl::StrCat(label, "=\"", value, "\""));
  return absl::StrCat(name, "{", absl::StrJoin(parts, ","), "}");
}

std::optional<double> Exposition::Value(const std::string& name,
                                        const std::map<std::string, std::string>& labels) const {
  auto it = samples.find(Key(name, labels));
  if (it == samples.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<Exposition> ParseExposition(const std::string& text) {
  Exposition out;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, " (", why, "): ", line));
    };
    if (line.empty()) continue;
    if (absl::ConsumePrefix(&line, "#")) {
      absl::string_view rest = absl::StripLeadingAsciiWhitespace(line);
      const bool is_help = absl::ConsumePrefix(&rest, "HELP ");
      const bool is_type = !is_help && absl::ConsumePrefix(&rest, "TYPE ");
      if (!is_help && !is_type) continue;  // a plain comment
      std::string name;
      if (!ConsumeName(&rest, &name)) return bad("no metric name");
      if (!rest.empty() && !absl::ConsumePrefix(&rest, " ")) return bad("bad metric name");
      if (is_help) {
        out.help[name] = Unescape(rest);
      } else {
        if (out.type.count(name) > 0) return bad("second TYPE line");
        out.type[name] = std::string(rest);
      }
      continue;
    }
    absl::string_view rest = line;
    std::string name;
    if (!ConsumeName(&rest, &name)) return bad("no metric name");
    std::map<std::string, std::string> labels;
    if (absl::ConsumePrefix(&rest, "{")) {
      while (!absl::ConsumePrefix(&rest, "}")) {
        std::string label, value;
        if (!ConsumeName(&rest, &label)) return bad("bad label name");
        if (!absl::ConsumePrefix(&rest, "=")) return bad("no '=' after a label name");
        if (!ConsumeQuoted(&rest, &value)) return bad("bad label value");
        if (!labels.emplace(label, value).second) return bad("repeated label");
        absl::ConsumePrefix(&rest, ",");
        if (rest.empty()) return bad("unterminated labels");
      }
    }
    const std::vector<absl::string_view> fields =
        absl::StrSplit(absl::StripAsciiWhitespace(rest), ' ', absl::SkipEmpty());
    if (fields.empty() || fields.size() > 2) return bad("expected a value and an optional timestamp");
    double value;
    if (!ParseValue(fields[0], &value)) return bad("bad value");
    // The family: the name itself, or for histograms and summaries the name without its sample suffix.
    std::string family = name;
    if (out.type.count(family) == 0) {
      for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
        absl::string_view base = name;
        if (absl::ConsumeSuffix(&base, suffix) && out.type.count(std::string(base)) > 0) {
          family = std::string(base);
          break;
        }
      }
    }
    if (out.type.count(family) == 0) return bad("sample without a TYPE line before it");
    if (!out.samples.emplace(Exposition::Key(name, labels), value).second) return bad("repeated sample");
  }
  return out;
}

absl::Status PromtoolCheckMetrics(const std::string& text) {
  if (access(kPromtoolPath, X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(kPromtoolPath, " is missing (Debian package prometheus)"));
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/promtool-input-XXXXXX");
  const int fd = mkstemp(path.data());
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path));
  close(fd);
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  const std::string command = absl::StrCat(kPromtoolPath, " check metrics < '", path, "' 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError(absl::StrCat("cannot run ", command));
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  unlink(path.c_str());
  if (status != 0 || !output.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "promtool check metrics (exit ", WIFEXITED(status) ? WEXITSTATUS(status) : -1, "): ", output));
  }
  return absl::OkStatus();
}

}  // namespace kestrel
