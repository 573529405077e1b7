// Reading the workers' JSON-lines records (worker/trainer.h: one flat object per line) in tests and benchmarks.
#ifndef KESTREL_TESTS_RECORDS_H_
#define KESTREL_TESTS_RECORDS_H_

#include <string>

namespace kestrel {

// The raw value of field `name` in one record line (quotes removed from strings), or "" when absent.
inline std::string RecordField(const std::string& line, const std::string& name) {
  const std::string tag = "\"" + name + "\":";
  const size_t at = line.find(tag);
  if (at == std::string::npos) return "";
  std::string value = line.substr(at + tag.size());
  value = value.substr(0, value.find_first_of(",}"));
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
  return value;
}

}  // namespace kestrel

#endif  // KESTREL_TESTS_RECORDS_H_
