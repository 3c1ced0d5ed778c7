// SVG rendering of scaling-report figures (see svg_plot.h).
#include "scaling/plot/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace lmf::plot {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

bool Usable(double v, Scale scale) { return std::isfinite(v) && (scale == Scale::kLinear || v > 0); }

double Forward(double v, Scale scale) { return scale == Scale::kLog ? std::log10(v) : v; }

// Text with "^k" drawn as a superscript k, where k is an optionally signed run of digits.
std::string RichText(const std::string& label) {
  const size_t caret = label.find('^');
  if (caret == std::string::npos) return XmlEscape(label);
  size_t end = caret + 1;
  if (end < label.size() && label[end] == '-') ++end;
  while (end < label.size() && label[end] >= '0' && label[end] <= '9') ++end;
  // A space right after the exponent becomes an offset: renderers drop leading spaces in a tspan.
  const bool space = end < label.size() && label[end] == ' ';
  return XmlEscape(label.substr(0, caret)) + "<tspan dy=\"-6\" font-size=\"9\">" +
         XmlEscape(label.substr(caret + 1, end - caret - 1)) + "</tspan><tspan dy=\"6\"" + (space ? " dx=\"4\"" : "") +
         ">" + XmlEscape(label.substr(space ? end + 1 : end)) + "</tspan>";
}

double TextWidth(const std::string& s, double font_px) { return 0.58 * font_px * static_cast<double>(s.size()); }

}  // namespace

std::string XmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Color(int i) {
  static const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                   "#56B4E9", "#000000", "#8C564B", "#7F7F7F", "#BCBD22"};
  const int n = sizeof(kPalette) / sizeof(kPalette[0]);
  return kPalette[((i % n) + n) % n];
}

std::string RampColor(double t) {
  // Stops of a yellow-orange-red-purple ramp, interpolated in RGB.
  static const double kStops[][3] = {{0.99, 0.75, 0.25}, {0.95, 0.45, 0.20}, {0.80, 0.20, 0.30},
                                     {0.55, 0.10, 0.45}, {0.25, 0.05, 0.40}};
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * 4;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  char buf[8];
  int rgb[3];
  for (int c = 0; c < 3; ++c) rgb[c] = static_cast<int>(std::lround(255 * (kStops[i][c] + f * (kStops[i + 1][c] - kStops[i][c]))));
  std::snprintf(buf, sizeof(buf), "#%02X%02X%02X", rgb[0], rgb[1], rgb[2]);
  return buf;
}

std::vector<Tick> LogTicks(double min, double max) {
  std::vector<Tick> ticks;
  if (!(min > 0) || !(max > min)) return ticks;
  if (std::log10(max / min) < 1) {
    // Less than a decade: evenly stepped values (1, 2, 5 x 10^k steps) read better than sparse decades.
    std::vector<Tick> linear = LinearTicks(min, max, 5);
    if (linear.size() >= 2) return linear;
  }
  const int lo = static_cast<int>(std::floor(std::log10(min) + 1e-9));
  const int hi = static_cast<int>(std::ceil(std::log10(max) - 1e-9));
  const int decades = hi - lo;
  const int step = decades > 16 ? 4 : decades > 8 ? 2 : 1;
  const bool label_25 = decades <= 1;
  for (int k = lo; k <= hi; ++k) {
    for (int m = 1; m <= 9; ++m) {
      const double v = m * std::pow(10.0, k);
      if (v < min * (1 - 1e-9) || v > max * (1 + 1e-9)) continue;
      Tick t;
      t.value = v;
      if (m == 1) {
        t.major = (k - lo) % step == 0;
        if (t.major) t.label = k == 0 ? "1" : k == 1 ? "10" : "10^" + std::to_string(k);
      } else if (label_25 && (m == 2 || m == 5)) {
        t.major = true;
        t.label = std::to_string(m) + (k == 0 ? "" : k == 1 ? "0" : "·10^" + std::to_string(k));
      } else {
        t.major = false;
        if (decades > 8) continue;  // minor ticks would crowd a long axis
      }
      ticks.push_back(t);
    }
  }
  // A short range inside one decade may hold no labelled tick: label the ends instead.
  int majors = 0;
  for (const Tick& t : ticks) majors += t.major;
  if (majors < 2) {
    for (double v : {min, max}) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.3g", v);
      ticks.push_back({v, true, buf});
    }
  }
  return ticks;
}

std::vector<Tick> LinearTicks(double min, double max, int target) {
  std::vector<Tick> ticks;
  if (!(max > min) || !std::isfinite(min) || !std::isfinite(max)) return ticks;
  const double raw = (max - min) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  const double first = std::ceil(min / step - 1e-9) * step;
  for (double v = first; v <= max + step * 1e-9; v += step) {
    const double clean = std::fabs(v) < step * 1e-9 ? 0.0 : v;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", clean);
    ticks.push_back({clean, true, buf});
  }
  return ticks;
}

Figure::Figure(std::string title, int width, int height) : title_(std::move(title)), width_(width), height_(height) {}

void Figure::AddLine(const std::vector<double>& x, const std::vector<double>& y, const Style& style,
                     const std::string& label) {
  series_.push_back({Kind::kLine, x, y, {}, style, Marker::kCircle, 0, label});
}

void Figure::AddMarkers(const std::vector<double>& x, const std::vector<double>& y, Marker marker, const Style& style,
                        const std::string& label, double size) {
  series_.push_back({Kind::kMarkers, x, y, {}, style, marker, size, label});
}

void Figure::AddBand(const std::vector<double>& x, const std::vector<double>& lower, const std::vector<double>& upper,
                     const Style& style, const std::string& label) {
  series_.push_back({Kind::kBand, x, lower, upper, style, Marker::kCircle, 0, label});
}

void Figure::AddVerticalLine(double x, const Style& style, const std::string& label) {
  series_.push_back({Kind::kVLine, {x}, {}, {}, style, Marker::kCircle, 0, label});
}

void Figure::AddHorizontalLine(double y, const Style& style, const std::string& label) {
  series_.push_back({Kind::kHLine, {}, {y}, {}, style, Marker::kCircle, 0, label});
}

namespace {

void MarkerPath(std::ostringstream& out, Marker marker, double cx, double cy, double r, const Style& style) {
  const std::string fill = "fill=\"" + style.color + "\" fill-opacity=\"" + Num(style.opacity) +
                           "\" stroke=\"#222222\" stroke-width=\"0.7\"";
  switch (marker) {
    case Marker::kCircle:
      out << "<circle cx=\"" << Num(cx) << "\" cy=\"" << Num(cy) << "\" r=\"" << Num(r) << "\" " << fill << "/>";
      break;
    case Marker::kSquare:
      out << "<rect x=\"" << Num(cx - r) << "\" y=\"" << Num(cy - r) << "\" width=\"" << Num(2 * r) << "\" height=\""
          << Num(2 * r) << "\" " << fill << "/>";
      break;
    case Marker::kTriangle:
      out << "<polygon points=\"" << Num(cx) << "," << Num(cy - 1.2 * r) << " " << Num(cx - 1.1 * r) << ","
          << Num(cy + 0.8 * r) << " " << Num(cx + 1.1 * r) << "," << Num(cy + 0.8 * r) << "\" " << fill << "/>";
      break;
    case Marker::kDiamond:
      out << "<polygon points=\"" << Num(cx) << "," << Num(cy - 1.3 * r) << " " << Num(cx + r) << "," << Num(cy) << " "
          << Num(cx) << "," << Num(cy + 1.3 * r) << " " << Num(cx - r) << "," << Num(cy) << "\" " << fill << "/>";
      break;
    case Marker::kCross:
      out << "<path d=\"M" << Num(cx - r) << " " << Num(cy - r) << "L" << Num(cx + r) << " " << Num(cy + r) << "M"
          << Num(cx - r) << " " << Num(cy + r) << "L" << Num(cx + r) << " " << Num(cy - r) << "\" stroke=\""
          << style.color << "\" stroke-width=\"" << Num(std::max(1.5, style.width)) << "\" fill=\"none\"/>";
      break;
    case Marker::kStar: {
      out << "<polygon points=\"";
      for (int k = 0; k < 10; ++k) {
        const double a = -M_PI / 2 + k * M_PI / 5;
        const double rr = (k % 2 == 0 ? 1.6 : 0.7) * r;
        out << (k ? " " : "") << Num(cx + rr * std::cos(a)) << "," << Num(cy + rr * std::sin(a));
      }
      out << "\" " << fill << "/>";
      break;
    }
  }
}

std::string StrokeAttrs(const Style& style) {
  std::string s = "stroke=\"" + style.color + "\" stroke-width=\"" + Num(style.width) + "\" stroke-opacity=\"" +
                  Num(style.opacity) + "\" fill=\"none\" stroke-linejoin=\"round\" stroke-linecap=\"round\"";
  if (style.dashed) s += " stroke-dasharray=\"7,5\"";
  return s;
}

}  // namespace

std::string Figure::Svg() const {
  // Data ranges in transformed (log10 or linear) coordinates.
  auto range = [&](bool is_x, const Axis& axis, double* lo, double* hi) {
    *lo = INFINITY;
    *hi = -INFINITY;
    auto take = [&](double v) {
      if (!Usable(v, axis.scale)) return;
      *lo = std::min(*lo, Forward(v, axis.scale));
      *hi = std::max(*hi, Forward(v, axis.scale));
    };
    for (const Series& s : series_) {
      if (is_x && s.kind != Kind::kHLine) for (double v : s.x) take(v);
      if (!is_x && s.kind != Kind::kVLine) {
        for (double v : s.y) take(v);
        for (double v : s.y2) take(v);
      }
    }
    if (!(*hi >= *lo)) {
      *lo = 0;
      *hi = 1;
    }
    if (*hi == *lo) {
      *lo -= 0.5;
      *hi += 0.5;
    }
    const double pad = 0.04 * (*hi - *lo);
    *lo -= pad;
    *hi += pad;
    if (std::isfinite(axis.min) && Usable(axis.min, axis.scale)) *lo = Forward(axis.min, axis.scale);
    if (std::isfinite(axis.max) && Usable(axis.max, axis.scale)) *hi = Forward(axis.max, axis.scale);
    if (!(*hi > *lo)) *hi = *lo + 1;  // limits given equal or reversed: keep the transform finite
  };
  double x0, x1, y0, y1;
  range(true, x_, &x0, &x1);
  range(false, y_, &y0, &y1);

  // Layout: legend to the right of the plot when any series has a label.
  double legend_width = 0;
  for (const Series& s : series_)
    if (!s.label.empty()) legend_width = std::max(legend_width, TextWidth(s.label, 12) + 46);
  const double left = 78, top = subtitle_.empty() ? 44 : 60, bottom = 58;
  const double right = legend_width > 0 ? legend_width + 18 : 24;
  const double pw = width_ - left - right, ph = height_ - top - bottom;
  auto px = [&](double v) { return left + (Forward(v, x_.scale) - x0) / (x1 - x0) * pw; };
  auto py = [&](double v) { return top + ph - (Forward(v, y_.scale) - y0) / (y1 - y0) * ph; };
  auto back = [](double t, Scale s) { return s == Scale::kLog ? std::pow(10.0, t) : t; };

  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width_ << "\" height=\"" << height_
      << "\" viewBox=\"0 0 " << width_ << " " << height_ << "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
  out << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  out << "<defs><clipPath id=\"plot-area\"><rect x=\"" << Num(left) << "\" y=\"" << Num(top) << "\" width=\""
      << Num(pw) << "\" height=\"" << Num(ph) << "\"/></clipPath></defs>\n";
  out << "<text x=\"" << Num(left) << "\" y=\"24\" font-size=\"16\" font-weight=\"bold\" fill=\"#111111\">"
      << XmlEscape(title_) << "</text>\n";
  if (!subtitle_.empty()) {
    out << "<text x=\"" << Num(left) << "\" y=\"42\" font-size=\"11.5\" fill=\"#555555\">" << XmlEscape(subtitle_)
        << "</text>\n";
  }

  // Grid and ticks.
  const std::vector<Tick> xt = x_.scale == Scale::kLog ? LogTicks(back(x0, x_.scale), back(x1, x_.scale))
                                                       : LinearTicks(x0, x1, std::max(3, static_cast<int>(pw / 90)));
  const std::vector<Tick> yt = y_.scale == Scale::kLog ? LogTicks(back(y0, y_.scale), back(y1, y_.scale))
                                                       : LinearTicks(y0, y1, std::max(3, static_cast<int>(ph / 60)));
  out << "<g>\n";
  for (const Tick& t : xt) {
    const double x = px(t.value);
    out << "<line x1=\"" << Num(x) << "\" y1=\"" << Num(top) << "\" x2=\"" << Num(x) << "\" y2=\"" << Num(top + ph)
        << "\" stroke=\"" << (t.major ? "#e2e2e2" : "#f2f2f2") << "\" stroke-width=\"1\"/>";
    out << "<line x1=\"" << Num(x) << "\" y1=\"" << Num(top + ph) << "\" x2=\"" << Num(x) << "\" y2=\""
        << Num(top + ph + (t.major ? 6 : 3)) << "\" stroke=\"#333333\" stroke-width=\"1\"/>";
    if (t.major && !t.label.empty()) {
      out << "<text x=\"" << Num(x) << "\" y=\"" << Num(top + ph + 21) << "\" font-size=\"12\" text-anchor=\"middle\" "
          << "fill=\"#222222\">" << RichText(t.label) << "</text>";
    }
    out << "\n";
  }
  for (const Tick& t : yt) {
    const double y = py(t.value);
    out << "<line x1=\"" << Num(left) << "\" y1=\"" << Num(y) << "\" x2=\"" << Num(left + pw) << "\" y2=\"" << Num(y)
        << "\" stroke=\"" << (t.major ? "#e2e2e2" : "#f2f2f2") << "\" stroke-width=\"1\"/>";
    out << "<line x1=\"" << Num(left - (t.major ? 6 : 3)) << "\" y1=\"" << Num(y) << "\" x2=\"" << Num(left)
        << "\" y2=\"" << Num(y) << "\" stroke=\"#333333\" stroke-width=\"1\"/>";
    if (t.major && !t.label.empty()) {
      out << "<text x=\"" << Num(left - 9) << "\" y=\"" << Num(y + 4) << "\" font-size=\"12\" text-anchor=\"end\" "
          << "fill=\"#222222\">" << RichText(t.label) << "</text>";
    }
    out << "\n";
  }
  out << "</g>\n";

  // Series, clipped to the plot area; bands first so lines and markers stay on top.
  out << "<g clip-path=\"url(#plot-area)\">\n";
  for (int pass = 0; pass < 3; ++pass) {
    for (const Series& s : series_) {
      const int order = s.kind == Kind::kBand ? 0 : s.kind == Kind::kMarkers ? 2 : 1;
      if (order != pass) continue;
      switch (s.kind) {
        case Kind::kBand: {
          std::ostringstream pts;
          std::vector<std::pair<double, double>> upper_pts;
          for (size_t i = 0; i < s.x.size(); ++i) {
            if (!Usable(s.x[i], x_.scale) || !Usable(s.y[i], y_.scale) || !Usable(s.y2[i], y_.scale)) continue;
            pts << Num(px(s.x[i])) << "," << Num(py(s.y[i])) << " ";
            upper_pts.push_back({px(s.x[i]), py(s.y2[i])});
          }
          std::reverse(upper_pts.begin(), upper_pts.end());
          for (const auto& [x, y] : upper_pts) pts << Num(x) << "," << Num(y) << " ";
          if (!upper_pts.empty()) {
            out << "<polygon points=\"" << pts.str() << "\" fill=\"" << s.style.color << "\" fill-opacity=\""
                << Num(s.style.opacity) << "\" stroke=\"none\"/>\n";
          }
          break;
        }
        case Kind::kLine: {
          std::ostringstream pts;
          int count = 0;
          auto flush = [&] {
            if (count >= 2) out << "<polyline points=\"" << pts.str() << "\" " << StrokeAttrs(s.style) << "/>\n";
            pts.str("");
            count = 0;
          };
          for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
            if (!Usable(s.x[i], x_.scale) || !Usable(s.y[i], y_.scale)) {
              flush();
              continue;
            }
            pts << Num(px(s.x[i])) << "," << Num(py(s.y[i])) << " ";
            ++count;
          }
          flush();
          break;
        }
        case Kind::kMarkers:
          for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
            if (!Usable(s.x[i], x_.scale) || !Usable(s.y[i], y_.scale)) continue;
            MarkerPath(out, s.marker, px(s.x[i]), py(s.y[i]), s.size, s.style);
          }
          out << "\n";
          break;
        case Kind::kVLine:
          if (Usable(s.x[0], x_.scale)) {
            out << "<line x1=\"" << Num(px(s.x[0])) << "\" y1=\"" << Num(top) << "\" x2=\"" << Num(px(s.x[0]))
                << "\" y2=\"" << Num(top + ph) << "\" " << StrokeAttrs(s.style) << "/>\n";
          }
          break;
        case Kind::kHLine:
          if (Usable(s.y[0], y_.scale)) {
            out << "<line x1=\"" << Num(left) << "\" y1=\"" << Num(py(s.y[0])) << "\" x2=\"" << Num(left + pw)
                << "\" y2=\"" << Num(py(s.y[0])) << "\" " << StrokeAttrs(s.style) << "/>\n";
          }
          break;
      }
    }
  }
  out << "</g>\n";

  // Frame and axis labels.
  out << "<rect x=\"" << Num(left) << "\" y=\"" << Num(top) << "\" width=\"" << Num(pw) << "\" height=\"" << Num(ph)
      << "\" fill=\"none\" stroke=\"#333333\" stroke-width=\"1\"/>\n";
  out << "<text x=\"" << Num(left + pw / 2) << "\" y=\"" << Num(height_ - 14)
      << "\" font-size=\"13\" text-anchor=\"middle\" fill=\"#111111\">" << XmlEscape(x_.label) << "</text>\n";
  out << "<text transform=\"translate(18," << Num(top + ph / 2) << ") rotate(-90)\" font-size=\"13\" "
      << "text-anchor=\"middle\" fill=\"#111111\">" << XmlEscape(y_.label) << "</text>\n";

  // Legend.
  if (legend_width > 0) {
    double ly = top + 8;
    const double lx = left + pw + 14;
    out << "<g font-size=\"12\" fill=\"#222222\">\n";
    for (const Series& s : series_) {
      if (s.label.empty()) continue;
      switch (s.kind) {
        case Kind::kBand:
          out << "<rect x=\"" << Num(lx) << "\" y=\"" << Num(ly - 6) << "\" width=\"26\" height=\"12\" fill=\""
              << s.style.color << "\" fill-opacity=\"" << Num(s.style.opacity) << "\"/>";
          break;
        case Kind::kMarkers:
          MarkerPath(out, s.marker, lx + 13, ly, std::min(s.size, 5.0), s.style);
          break;
        default:
          out << "<line x1=\"" << Num(lx) << "\" y1=\"" << Num(ly) << "\" x2=\"" << Num(lx + 26) << "\" y2=\""
              << Num(ly) << "\" " << StrokeAttrs(s.style) << "/>";
      }
      out << "<text x=\"" << Num(lx + 34) << "\" y=\"" << Num(ly + 4) << "\">" << RichText(s.label) << "</text>\n";
      ly += 20;
    }
    out << "</g>\n";
  }
  out << "</svg>\n";
  return out.str();
}

}  // namespace lmf::plot
