// Tests for the SVG plotting library: tick placement on log and linear axes, escaping, and the elements a
// figure draws (lines split at gaps, markers, bands, legend entries) in the plot's coordinates.
#include "scaling/plot/svg_plot.h"

#include <cmath>
#include <regex>

#include "gtest/gtest.h"

namespace lmf::plot {
namespace {

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

TEST(LogTicksTest, LabelsDecadesWithMinorTicksBetween) {
  const std::vector<Tick> ticks = LogTicks(2e17, 3e21);
  std::vector<double> majors;
  int minors = 0;
  for (const Tick& t : ticks) {
    if (t.major) {
      majors.push_back(t.value);
    } else {
      ++minors;
    }
  }
  ASSERT_EQ(majors.size(), 4u);  // 1e18 .. 1e21
  EXPECT_DOUBLE_EQ(majors[0], 1e18);
  EXPECT_EQ(ticks[0].value, 2e17);  // a minor tick below the first decade
  EXPECT_EQ(minors, 8 + 8 * 3 + 2);  // 2..9e17, 2..9 in each of 3 decades, 2e21 and 3e21
  for (const Tick& t : ticks)
    if (t.value == 1e19) {
      EXPECT_EQ(t.label, "10^19");
    }
}

TEST(LogTicksTest, LongRangesLabelEveryOtherDecadeAndShortOnesUseEvenSteps) {
  int majors = 0;
  for (const Tick& t : LogTicks(1e6, 1e16)) majors += t.major;
  EXPECT_EQ(majors, 6);  // 1e6, 1e8, ..., 1e16
  std::vector<std::string> labels;
  for (const Tick& t : LogTicks(1.72, 3.95))
    if (t.major) labels.push_back(t.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"2", "2.5", "3", "3.5"}));  // under a decade: even steps
}

TEST(LinearTicksTest, UsesOneTwoFiveSteps) {
  std::vector<double> values;
  for (const Tick& t : LinearTicks(-0.013, 0.041, 10)) values.push_back(t.value);
  ASSERT_EQ(values.size(), 6u);
  EXPECT_NEAR(values[0], -0.01, 1e-15);
  EXPECT_NEAR(values[1], 0.0, 0.0);
  EXPECT_NEAR(values[5], 0.04, 1e-15);
}

TEST(FigureTest, DrawsSeriesInsideThePlotAndEscapesText) {
  Figure fig("Loss <vs> compute & more", 600, 400);
  fig.x_axis() = {"compute C (FLOP)", Scale::kLog, 1e18, 1e22};
  fig.y_axis() = {"loss", Scale::kLinear, 2, 4};
  // A NaN splits the line into two polylines; a non-positive x is unusable on the log axis.
  fig.AddLine({1e18, 1e19, NAN, 1e21, 1e22}, {3.5, 3.0, 2.8, 2.6, 2.4}, {Color(0)}, "fit");
  fig.AddMarkers({1e19, 1e20, -1}, {3.1, 2.9, 3}, Marker::kCircle, {Color(1)}, "runs");
  fig.AddBand({1e18, 1e22}, {2.2, 2.3}, {3.8, 3.9}, {Color(2), 1, false, 0.2}, "95% band");
  fig.AddVerticalLine(1e21, {"#888888", 1, true}, "");
  const std::string svg = fig.Svg();
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("Loss &lt;vs&gt; compute &amp; more"), std::string::npos);
  EXPECT_EQ(Count(svg, "<polyline"), 2);
  EXPECT_EQ(Count(svg, "<circle"), 2 + 1);  // two usable runs and the legend sample
  EXPECT_EQ(Count(svg, "<polygon"), 1);
  EXPECT_EQ(Count(svg, "stroke-dasharray"), 1);
  EXPECT_NE(svg.find(">fit</text>"), std::string::npos);
  EXPECT_NE(svg.find(">95% band</text>"), std::string::npos);
  EXPECT_NE(svg.find("<tspan dy=\"-6\" font-size=\"9\">20</tspan>"), std::string::npos);  // 10^20 label
  // Only the exponent is raised: text after it returns to the baseline.
  Figure legend("t");
  legend.AddVerticalLine(1, {}, "target 10^22 FLOP");
  EXPECT_NE(legend.Svg().find("target 10<tspan dy=\"-6\" font-size=\"9\">22</tspan><tspan dy=\"6\" dx=\"4\">FLOP</tspan>"),
            std::string::npos);

  // x = 1e20 is the middle of [1e18, 1e22] on a log axis: the marker at 1e20 sits at the plot's centre.
  // Plot area: left 78, width 600 - 78 - right, where right = legend width + 18.
  const std::regex circle("<circle cx=\"([0-9.]+)\" cy=\"([0-9.]+)\"");
  std::vector<double> cx;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), circle); it != std::sregex_iterator(); ++it)
    cx.push_back(std::stod((*it)[1]));
  ASSERT_GE(cx.size(), 2u);
  const std::regex frame("<rect x=\"78\" y=\"([0-9.]+)\" width=\"([0-9.]+)\" height=\"([0-9.]+)\" fill=\"none\"");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, frame));
  const double width = std::stod(m[2]);
  EXPECT_NEAR(cx[1], 78 + width / 2, 0.01);
  EXPECT_NEAR(cx[0], 78 + width / 4, 0.01);
}

TEST(FigureTest, AutoRangeCoversTheDataWithAMargin) {
  Figure fig("auto");
  fig.x_axis().scale = Scale::kLog;
  fig.AddMarkers({1e6, 1e9}, {1, 2}, Marker::kSquare, {Color(0)});
  const std::string svg = fig.Svg();
  EXPECT_EQ(Count(svg, "<rect x="), 2 + 1 + 1);  // two markers, the clip rectangle, the frame
  EXPECT_NE(svg.find("<tspan dy=\"-6\" font-size=\"9\">6</tspan>"), std::string::npos);
  EXPECT_NE(svg.find("<tspan dy=\"-6\" font-size=\"9\">9</tspan>"), std::string::npos);
}

TEST(RampColorTest, RunsFromLightToDark) {
  EXPECT_EQ(RampColor(0), "#FCBF40");
  EXPECT_EQ(RampColor(1), "#400D66");
  EXPECT_EQ(RampColor(2), RampColor(1));
}

}  // namespace
}  // namespace lmf::plot
