// The Prometheus text exposition format (version 0.0.4) as every writer of /metrics in
// daemon/metrics writes it (stats_format.cc, latency_format.cc): a family's HELP and TYPE lines,
// one sample line, an escaped label value. Internal to daemon/metrics.
//
// Pure functions of their inputs; safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace kvtier::metrics::prometheus {

// "# HELP <name> <help>" and "# TYPE <name> <type>".
void Header(std::string& out, std::string_view name, std::string_view type, std::string_view help);

// "<name>{<labels>} <value>", without the braces when `labels` is empty; `format` (printf, one
// double) prints the value: the default keeps every digit, a histogram's counts use "%.0f".
void Sample(std::string& out, std::string_view name, std::string_view labels, double value,
            const char* format = "%.17g");

// A label value with backslash, quote and newline escaped, and bytes that are not UTF-8 replaced
// by U+FFFD.
std::string Escape(std::string_view value);

}  // namespace kvtier::metrics::prometheus
