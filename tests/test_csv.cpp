// CSV as RFC 4180 defines it (scenarios/io/csv.hpp): the one writer and reader of tierlab's
// CSV files, and a run's tables read back with a trace name holding a comma, a double quote
// and a line end.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "model/base/error.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "support.hpp"

using namespace tierlab;
using tierlab::testing::error_of;
using tierlab::testing::slurp;
using tierlab::testing::TempDir;

namespace {

// Every field of every record, in order.
std::vector<std::vector<std::string>> read_all(const std::string& text) {
  CsvReader r(text);
  std::vector<std::vector<std::string>> out;
  while (auto rec = r.next()) out.push_back(*rec);
  return out;
}

}  // namespace

TEST_CASE("CSV fields with commas, double quotes, CR, LF and empty fields read back as they were written") {
  const std::vector<std::string> fields = {"plain", "a,b", "say \"hi\"", "two\nlines", "cr\rhere", "crlf\r\nend", "",
                                           "\"", ",", "\"a\",\"b\"", " spaced ", "nan"};
  std::vector<std::string> header;
  for (std::size_t i = 0; i < fields.size(); ++i) header.push_back("c" + std::to_string(i));
  header[1] = "name, with comma";
  CsvWriter w(header);
  w.row();
  for (const auto& f : fields) w << f;
  w.row() << 42 << std::size_t{7} << true << false << "" << "x" << -3 << "" << "" << "" << "" << "";
  const std::string text = w.text();
  // Quoted only where RFC 4180 needs it, inner quotes doubled, LF after every record.
  CHECK(text.rfind("c0,\"name, with comma\",c2,", 0) == 0);
  CHECK(text.find("\nplain,\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\",\"cr\rhere\",\"crlf\r\nend\",,\"\"\"\",\",\","
                  "\"\"\"a\"\",\"\"b\"\"\", spaced ,nan\n") != std::string::npos);
  CHECK(text.substr(text.size() - 21) == "\n42,7,1,0,,x,-3,,,,,\n");

  const auto records = read_all(text);
  REQUIRE(records.size() == 3);
  CHECK(records[0] == header);
  CHECK(records[1] == fields);
  CHECK(records[2] == std::vector<std::string>{"42", "7", "1", "0", "", "x", "-3", "", "", "", "", ""});

  // CRLF record ends (RFC 4180's own) read the same; a final line end starts no record.
  CHECK(read_all("a,b\r\n1,\"x\r\ny\"\r\n") == std::vector<std::vector<std::string>>{{"a", "b"}, {"1", "x\r\ny"}});
  CHECK(read_all("a,b\n1,") == std::vector<std::vector<std::string>>{{"a", "b"}, {"1", ""}});
  CHECK(read_all("").empty());

  // The same text through the tables' reader: the columns by name, the fields as written.
  TempDir d("csv-round-trip");
  write_file_atomically(d.file("t.csv"), text);
  const auto cols = read_table_csv(d.file("t.csv"));
  REQUIRE(cols.size() == header.size());
  for (std::size_t i = 0; i < fields.size(); ++i) CHECK(cols.at(header[i]).at(0) == fields[i]);
  CHECK(cols.at("name, with comma").at(1) == "7");
}

TEST_CASE("A CSV record with another number of fields than its header is a defect of the writer") {
  CsvWriter w({"a", "b"});
  w.row() << "1";
  CHECK_THROWS_AS(w.row(), std::logic_error);
  CsvWriter v({"a", "b"});
  v.row() << "1" << "2" << "3";
  CHECK_THROWS_WITH(v.text(), Catch::Contains("record 1 has 3 fields; the header has 2"));
  CsvWriter u({"a"});
  CHECK_THROWS_AS(u << "x", std::logic_error);  // a field before the first row()
}

TEST_CASE("A malformed CSV table is an input error naming the file, the row and what is wrong") {
  TempDir d("csv-malformed");
  auto fault = [&](const std::string& text) {
    write_file_atomically(d.file("t.csv"), text);
    return error_of<InputError>([&] { read_table_csv(d.file("t.csv")); });
  };
  std::string m = fault("a,b\n1,2\n3,\"unclosed\n");
  CHECK_THAT(m, Catch::Contains("t.csv") && Catch::Contains("row 2") && Catch::Contains("not closed"));
  m = fault("a,b\n1,\"x\"y\n");
  CHECK_THAT(m, Catch::Contains("row 1") && Catch::Contains("followed by 'y'"));
  m = fault("a,b\n1,x\"y\n");
  CHECK_THAT(m, Catch::Contains("row 1") && Catch::Contains("double quote inside an unquoted field"));
  m = fault("\"a,b\n");
  CHECK_THAT(m, Catch::Contains("header line") && Catch::Contains("not closed"));
  // The checks that were there before: fields per row, numbers in a column of numbers.
  m = fault("a,b\n1,2\n3,4,5\n");
  CHECK_THAT(m, Catch::Contains("row 2: 3 fields; the header has 2 columns"));
  m = fault("a,b\n1,2\n3,4\n5,6\nx,\"8\"\n");
  CHECK_THAT(m, Catch::Contains("row 4, column 'a': 'x' is not a number"));
}

TEST_CASE("A run's tables read back with the right values when a trace name holds a comma, a double quote and a line end") {
  TempDir d("csv-trace-name");
  SynthParams p = synth_preset("tiny");
  p.n_layers = 1, p.prompt_len = 48, p.decode_steps = 8, p.obs_window = 8;
  const std::string stem = "trace \"x\", y\nz";
  write_synthetic_trace(p, d.file(stem + ".safetensors"));
  const std::string yaml = "name: odd-name\n"
                           "traces:\n"
                           "  files: [\"" + d.file("trace \\\"x\\\", y\\nz.safetensors") + "\"]\n"
                           "budgets: [2, 4]\n"
                           "backend: cpu\n"
                           "bootstrap: 100\n";
  const Scenario sc = parse_scenario(yaml, d.file("odd.yaml"));
  REQUIRE(sc.cells.size() == 1);
  const std::string id = "file-" + stem;
  REQUIRE(sc.cells[0].id == id);
  RunOptions opt;
  opt.out = d.file("out");
  opt.progress = false;
  REQUIRE(run_scenario(sc, opt).tables_written);

  const nlohmann::json cells = nlohmann::json::parse(slurp(opt.out + "/tables/cells.json"));
  REQUIRE(cells.size() == 2);
  const auto cc = read_table_csv(opt.out + "/tables/cells.csv");
  REQUIRE(cc.at("cell").size() == 2);
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(cc.at("cell")[r] == id);
    CHECK(cc.at("preset")[r] == "file");
    CHECK(std::strtod(cc.at("budget")[r].c_str(), nullptr) == cells[r]["budget"].get<double>());
    CHECK(std::strtod(cc.at("prompt_len")[r].c_str(), nullptr) == 48);
    for (const char* k : {"A", "A_surrogate", "dominated_share"})
      if (cells[r][k].is_number())
        CHECK(std::strtod(cc.at(k)[r].c_str(), nullptr) == Approx(cells[r][k].get<double>()).epsilon(1e-5));
    CHECK(cc.at("winner")[r] == cells[r]["winner"].get<std::string>());
  }
  // heads.csv: one row per head and budget, every one of this cell, the heads in order.
  const auto hc = read_table_csv(opt.out + "/tables/heads.csv");
  const std::size_t heads = static_cast<std::size_t>(p.n_layers * p.n_kv_heads);
  REQUIRE(hc.at("cell").size() == 2 * heads);
  for (std::size_t r = 0; r < 2 * heads; ++r) {
    CHECK(hc.at("cell")[r] == id);
    CHECK(hc.at("budget")[r] == (r < heads ? "2" : "4"));
    CHECK(hc.at("kv_head")[r] == std::to_string(r % heads));
  }
}
