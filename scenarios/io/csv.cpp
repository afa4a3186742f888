// CSV as RFC 4180 defines it (csv.hpp).
#include "scenarios/io/csv.hpp"

#include <stdexcept>

#include "model/base/error.hpp"

namespace tierlab {

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string q = "\"";
  for (const char c : text) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + '"';
}

CsvWriter::CsvWriter(std::vector<std::string> header) : columns_(header.size()) {
  for (std::size_t i = 0; i < header.size(); ++i) text_ += (i ? "," : "") + csv_field(header[i]);
  header_ = text_.substr(0, 200);
  text_ += '\n';
}

CsvWriter& CsvWriter::row() {
  end_record();
  open_ = true;
  fields_ = 0;
  ++rows_;
  return *this;
}

CsvWriter& CsvWriter::add(std::string_view field) {
  if (!open_) throw std::logic_error("CSV table '" + header_ + "': a field written before the first row()");
  if (fields_++) text_ += ',';
  text_ += csv_field(field);
  return *this;
}

void CsvWriter::end_record() {
  if (!open_) return;
  open_ = false;
  if (fields_ != columns_)
    throw std::logic_error("CSV table '" + header_ + "': record " + std::to_string(rows_) + " has " +
                           std::to_string(fields_) + " fields; the header has " + std::to_string(columns_));
  text_ += '\n';
}

const std::string& CsvWriter::text() {
  end_record();
  return text_;
}

std::optional<std::vector<std::string>> CsvReader::next() {
  if (at_ >= text_.size()) return std::nullopt;
  std::vector<std::string> fields;
  std::string field;
  const std::size_t n = text_.size();
  while (true) {
    if (at_ < n && text_[at_] == '"') {
      // A quoted field: up to the quote that is not doubled.
      ++at_;
      while (true) {
        if (at_ >= n) throw InputError("a quoted field is not closed (no closing double quote before the end of the file)");
        const char c = text_[at_++];
        if (c != '"') {
          field += c;
        } else if (at_ < n && text_[at_] == '"') {
          field += '"';
          ++at_;
        } else {
          break;
        }
      }
      if (at_ < n && text_[at_] != ',' && text_[at_] != '\n' && !(text_[at_] == '\r' && at_ + 1 < n && text_[at_ + 1] == '\n'))
        throw InputError("a quoted field is followed by '" + std::string(1, text_[at_]) +
                         "' (after a closing double quote comes ',' or the end of the line)");
    } else {
      // An unquoted field: up to ',' or the line end (LF or CRLF).
      while (at_ < n && text_[at_] != ',' && text_[at_] != '\n' && !(text_[at_] == '\r' && at_ + 1 < n && text_[at_ + 1] == '\n')) {
        if (text_[at_] == '"')
          throw InputError("a double quote inside an unquoted field '" + field.substr(0, 60) +
                           "' (a field holding one is enclosed in double quotes, inner quotes doubled)");
        field += text_[at_++];
      }
    }
    fields.push_back(std::move(field));
    field.clear();
    if (at_ >= n) return fields;
    if (text_[at_] == ',') {
      ++at_;
      continue;
    }
    at_ += text_[at_] == '\r' ? 2 : 1;  // the line end
    return fields;
  }
}

}  // namespace tierlab
