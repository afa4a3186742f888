#pragma once
// CSV as RFC 4180 defines it: the one writer and the one reader of every CSV file tierlab
// writes (the analyses' tables DIR/tables/*.csv, a figure's data, the explorer's exports).
//   A file is records, each ended by a line feed (LF, "\n"; RFC 4180 writes CRLF, the reader
//   takes either); a record is fields separated by ','; the first record is the header.
//   A field that holds a comma, a double quote, CR or LF is enclosed in double quotes, with
//   each double quote inside doubled: a,"b, ""c""" is the two fields  a  and  b, "c".
//   Every other field is written as it is, so a number reads back as the text written.
#include <concepts>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tierlab {

// The field as CSV text: enclosed in double quotes (inner quotes doubled) when it holds a
// comma, a double quote, CR or LF; else as it is.
std::string csv_field(std::string_view text);

// A CSV text built record by record:
//   CsvWriter w({"cell", "budget", "A"});
//   w.row() << id << format_or_nan(B) << format_or_nan(A);   // one record
//   write_file_atomically(path, w.text());
// A field is text (quoted when it must be), an integer (decimal) or a bool (1 or 0); a
// floating-point number is refused at compile time: format it first (format_or_nan,
// format_exact in model/base/text.hpp), so a table's number text is chosen where it is written.
// A record with another number of fields than the header is a defect: std::logic_error
// naming the record and the header, when the next record starts or at text().
class CsvWriter {
 public:
  explicit CsvWriter(std::vector<std::string> header);

  // Ends the record being written (if any) and starts the next one.
  CsvWriter& row();
  // One more field of the record being written (std::logic_error before the first row()).
  template <class T>
  CsvWriter& operator<<(const T& field) {
    if constexpr (std::is_same_v<T, bool>) {
      return add(field ? "1" : "0");
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, char>) {
      return add(std::to_string(field));
    } else {
      static_assert(std::is_convertible_v<const T&, std::string_view>,
                    "a CSV field is text, an integer or a bool: format a floating-point number first");
      return add(std::string_view(field));
    }
  }
  // The whole text: the header and every record, each ended by "\n" (ends the last record).
  const std::string& text();
  // The records written after the header (the one being written included).
  std::size_t rows() const { return rows_; }

 private:
  CsvWriter& add(std::string_view field);
  void end_record();

  std::size_t columns_ = 0, rows_ = 0, fields_ = 0;
  bool open_ = false;
  std::string header_, text_;
};

// Reads CSV text (RFC 4180, LF or CRLF record ends) one record at a time.
class CsvReader {
 public:
  explicit CsvReader(std::string_view text) : text_(text) {}
  // The next record's fields; nullopt at the end of the text (a final line end does not
  // start a record). InputError (a sentence to prefix with the file and the record) when a
  // quoted field is not closed before the end of the text or a closing quote is followed by
  // something other than ',' or a line end; a double quote inside an unquoted field likewise.
  std::optional<std::vector<std::string>> next();

 private:
  std::string_view text_;
  std::size_t at_ = 0;
};

}  // namespace tierlab
