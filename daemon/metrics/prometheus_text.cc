#include "daemon/metrics/prometheus_text.h"

#include <cstdio>

#include "common/utf8.h"

namespace kvtier::metrics::prometheus {

void Header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void Sample(std::string& out, std::string_view name, std::string_view labels, double value,
            const char* format) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(text).append("\n");
}

std::string Escape(std::string_view value) {
  // The text format is UTF-8: a scraper drops the whole scrape over one bad label value.
  const std::string text = ReplaceInvalidUtf8(value);
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace kvtier::metrics::prometheus
