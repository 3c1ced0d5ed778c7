// A small SVG plotting library for the scaling reports: one figure with x/y axes (linear or log), ticks
// and grid lines, and series drawn as lines, markers or shaded bands, with a legend. It writes plain SVG
// 1.1 text (no scripts, no external fonts) that browsers, GitHub and rsvg-convert render the same.
//
//   Figure fig("IsoFLOP profiles", 760, 480);
//   fig.x_axis() = {"parameters N", Scale::kLog};
//   fig.AddLine(xs, ys, {Color(0)}, "C = 1e19");
//   std::string svg = fig.Svg();
#ifndef LMFORGE_SCALING_PLOT_SVG_PLOT_H_
#define LMFORGE_SCALING_PLOT_SVG_PLOT_H_

#include <string>
#include <vector>

namespace lmf::plot {

enum class Scale { kLinear, kLog };

struct Axis {
  std::string label;
  Scale scale = Scale::kLinear;
  // Limits; NaN means "from the data" (with a small margin).
  double min = __builtin_nan("");
  double max = __builtin_nan("");
};

struct Style {
  std::string color = "#1f77b4";
  double width = 1.8;      // stroke width of lines and marker outlines (px)
  bool dashed = false;
  double opacity = 1.0;    // of strokes and marker fills; bands use it for their fill
};

enum class Marker { kCircle, kSquare, kTriangle, kDiamond, kCross, kStar };

// The i-th colour of a palette that stays distinguishable for colour-blind readers (Okabe-Ito, then
// darker variants).
std::string Color(int i);

// A colour from a sequential ramp (light yellow to dark purple), t in [0, 1]: for ordered series such as
// compute budgets.
std::string RampColor(double t);

struct Tick {
  double value = 0;
  bool major = true;  // majors carry a label and a grid line
  std::string label;  // plain text; "1e18" style powers are drawn with a superscript
};

// Ticks for [min, max]: decades (with 2 and 5 between when the range is short, every other decade when it
// is long) on a log scale, 1/2/5 x 10^k steps giving about `target` majors on a linear one.
std::vector<Tick> LogTicks(double min, double max);
std::vector<Tick> LinearTicks(double min, double max, int target = 6);

class Figure {
 public:
  Figure(std::string title, int width = 760, int height = 480);

  Axis& x_axis() { return x_; }
  Axis& y_axis() { return y_; }

  // Points with a non-finite value (or non-positive on a log axis) break a line into pieces and are
  // skipped by markers. A label puts the series in the legend.
  void AddLine(const std::vector<double>& x, const std::vector<double>& y, const Style& style,
               const std::string& label = "");
  void AddMarkers(const std::vector<double>& x, const std::vector<double>& y, Marker marker, const Style& style,
                  const std::string& label = "", double size = 4.5);
  // The region between lower(x) and upper(x), filled with style.color at style.opacity.
  void AddBand(const std::vector<double>& x, const std::vector<double>& lower, const std::vector<double>& upper,
               const Style& style, const std::string& label = "");
  // A vertical line across the plot at x, labelled at the top.
  void AddVerticalLine(double x, const Style& style, const std::string& label = "");
  // A horizontal line across the plot at y.
  void AddHorizontalLine(double y, const Style& style, const std::string& label = "");
  // A short note under the title (e.g. the data source).
  void SetSubtitle(std::string subtitle) { subtitle_ = std::move(subtitle); }

  std::string Svg() const;

 private:
  enum class Kind { kLine, kMarkers, kBand, kVLine, kHLine };
  struct Series {
    Kind kind;
    std::vector<double> x, y, y2;
    Style style;
    Marker marker = Marker::kCircle;
    double size = 4.5;
    std::string label;
  };

  std::string title_, subtitle_;
  int width_, height_;
  Axis x_, y_;
  std::vector<Series> series_;
};

// Escapes &, <, >, " and ' for SVG text and attributes.
std::string XmlEscape(const std::string& text);

}  // namespace lmf::plot

#endif  // LMFORGE_SCALING_PLOT_SVG_PLOT_H_
