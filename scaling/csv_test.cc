// Tests for the CSV reader: quoting, line ends, and errors that name file, line and column.
#include "scaling/csv.h"

#include "gtest/gtest.h"

namespace lmf::scaling {
namespace {

TEST(ParseCsvTest, ReadsQuotedFieldsEscapesAndCrlf) {
  absl::StatusOr<CsvTable> t = ParseCsv("a,b,c\r\n1,\"x,y\",\"say \"\"hi\"\"\"\r\n\r\n2,\"two\nlines\",3\n", "t.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->rows.size(), 2u);
  EXPECT_EQ(t->rows[0].fields[1], "x,y");
  EXPECT_EQ(t->rows[0].fields[2], "say \"hi\"");
  EXPECT_EQ(t->rows[1].fields[1], "two\nlines");
  EXPECT_EQ(t->rows[0].line, 2);
  EXPECT_EQ(t->rows[1].line, 4);
  EXPECT_EQ(t->Column("c"), 2);
  EXPECT_EQ(t->Column("d"), -1);
}

TEST(ParseCsvTest, ReportsTheLineOfARowWithTheWrongFieldCount) {
  absl::StatusOr<CsvTable> t = ParseCsv("a,b\n1,2\n3\n", "runs.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "runs.csv:3: 1 fields, but the header has 2");
}

TEST(ParseCsvTest, ReportsUnclosedAndStrayQuotes) {
  absl::StatusOr<CsvTable> t = ParseCsv("a,b\n1,\"open\n", "q.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "q.csv:2:2: a quoted field is never closed");
  t = ParseCsv("a,b\n1,x\"y\n", "q.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("q.csv:2:2: a quote inside an unquoted field"), std::string::npos);
}

TEST(ParseCsvTest, RejectsEmptyFilesAndDuplicateColumns) {
  EXPECT_FALSE(ParseCsv("", "e.csv").ok());
  absl::StatusOr<CsvTable> t = ParseCsv("a,b,a\n", "d.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "d.csv:1:3: column 'a' appears twice");
}

TEST(CsvTableTest, NumbersAreCheckedWithTheirPlace) {
  absl::StatusOr<CsvTable> t = ParseCsv("n,loss\n64,2.5\n1e3,abc\n12.5,\n", "r.csv");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->Integer(t->rows[0], 0), 64);
  EXPECT_EQ(*t->Integer(t->rows[1], 0), 1000);
  EXPECT_DOUBLE_EQ(*t->Double(t->rows[0], 1), 2.5);
  absl::StatusOr<double> bad = t->Double(t->rows[1], 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "r.csv:3:2 (loss): expected a number, got 'abc'");
  EXPECT_FALSE(t->Integer(t->rows[2], 0).ok());
  EXPECT_FALSE(t->Double(t->rows[2], 1).ok());
  EXPECT_TRUE(std::isnan(*t->Double(t->rows[2], 1, /*allow_empty=*/true)));
  absl::StatusOr<int> missing = t->RequireColumn("tokens");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "r.csv:1: missing column 'tokens'; the header has: n, loss");
}

TEST(CsvFieldTest, QuotesOnlyWhenNeeded) {
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"x\""), "\"say \"\"x\"\"\"");
}

}  // namespace
}  // namespace lmf::scaling
