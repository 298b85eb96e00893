//! SVG plots with no browser: a recipe's results across commits, a parameter sweep, and a
//! bisection report with its good and bad ends and its culprit marked. Every point is a median
//! with its 95% interval.

use std::fmt::Write as _;

/// One point: an x label, a position, a median and its interval, and how to draw it.
#[derive(Clone, Debug)]
pub struct Point {
    /// The x position (commit index, or parameter value).
    pub x: f64,
    /// The label under the x axis (a short hash, a parameter value).
    pub label: String,
    /// The median, if there is one (a build step has none).
    pub y: Option<f64>,
    /// The 95% interval.
    pub ci: Option<(f64, f64)>,
    /// good, bad, skip, ok, wrong, crash... (colour).
    pub verdict: String,
}

/// A vertical marker (the good end, the bad end, the culprit).
#[derive(Clone, Debug)]
pub struct Marker {
    /// Where.
    pub x: f64,
    /// What.
    pub label: String,
    /// Its colour.
    pub colour: &'static str,
}

fn colour(verdict: &str) -> &'static str {
    match verdict {
        "good" | "ok" => "#2e7d32",
        "bad" | "wrong" | "crash" | "timeout" => "#c62828",
        "skip" => "#9e9e9e",
        _ => "#1565c0",
    }
}

use xml_text as esc;

/// Text for an SVG element or attribute: control characters (invalid in XML 1.0) escaped
/// visibly by the one terminal-escaping function, then the XML specials.
pub fn xml_text(s: &str) -> String {
    crate::foundation::output::sanitize(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// Renders a plot: title, axis labels, points with interval bars, vertical markers.
/// `log_x` spaces x logarithmically (sweeps over sizes).
pub fn render(
    title: &str,
    x_label: &str,
    y_label: &str,
    points: &[Point],
    markers: &[Marker],
    log_x: bool,
) -> String {
    let f = Frame::fit(points, markers, log_x);
    let (w, h) = (f.w, f.h);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"11\">\n"
    );
    let _ = writeln!(s, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"28\" font-size=\"15\">{}</text>",
        f.left,
        esc(title)
    );
    f.axes(&mut s, x_label, y_label);
    for m in markers {
        f.marker(&mut s, m);
    }
    for p in points {
        f.point(&mut s, p);
    }
    s.push_str("</svg>\n");
    s
}

/// The drawing area and the data's range: where a value lands on the canvas.
struct Frame {
    w: f64,
    h: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    xmin: f64,
    xmax: f64,
    ymax: f64,
    log_x: bool,
}

impl Frame {
    fn fit(points: &[Point], markers: &[Marker], log_x: bool) -> Frame {
        let mut f = Frame {
            w: 900.0,
            h: 480.0,
            left: 80.0,
            right: 30.0,
            top: 50.0,
            bottom: 90.0,
            xmin: 0.0,
            xmax: 0.0,
            ymax: 0.0,
            log_x,
        };
        let xs: Vec<f64> = points
            .iter()
            .map(|p| f.tx(p.x))
            .chain(markers.iter().map(|m| f.tx(m.x)))
            .collect();
        let (xmin, xmax) = xs
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
                (a.min(x), b.max(x))
            });
        (f.xmin, f.xmax) = if xmin.is_finite() && xmax > xmin {
            (xmin, xmax)
        } else {
            (xmin.min(0.0) - 1.0, xmax.max(0.0) + 1.0)
        };
        let ys: Vec<f64> = points
            .iter()
            .flat_map(|p| {
                p.y.into_iter()
                    .chain(p.ci.into_iter().flat_map(|(a, b)| [a, b]))
            })
            .collect();
        f.ymax = ys
            .iter()
            .cloned()
            .fold(0.0_f64, f64::max)
            .max(f64::MIN_POSITIVE)
            * 1.1;
        f
    }

    fn tx(&self, x: f64) -> f64 {
        if self.log_x {
            x.max(f64::MIN_POSITIVE).log2()
        } else {
            x
        }
    }

    fn px(&self, x: f64) -> f64 {
        self.left
            + (self.tx(x) - self.xmin) / (self.xmax - self.xmin) * (self.w - self.left - self.right)
    }

    fn py(&self, y: f64) -> f64 {
        self.top + (1.0 - y / self.ymax) * (self.h - self.top - self.bottom)
    }

    /// Axes and horizontal grid lines with their values, and the axis labels.
    fn axes(&self, s: &mut String, x_label: &str, y_label: &str) {
        let (w, h, left, right, top, bottom) =
            (self.w, self.h, self.left, self.right, self.top, self.bottom);
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>",
            h - bottom,
            w - right,
            h - bottom
        );
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>",
            h - bottom
        );
        for k in 0..=4 {
            let y = self.ymax * f64::from(k) / 4.0;
            let _ = writeln!(
                s,
                "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{}\" y2=\"{:.1}\" stroke=\"#e0e0e0\"/>",
                self.py(y),
                w - right,
                self.py(y)
            );
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                left - 6.0,
                self.py(y) + 4.0,
                fmt(y)
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            (left + w - right) / 2.0,
            h - 12.0,
            esc(x_label)
        );
        let _ = writeln!(
            s,
            "<text x=\"16\" y=\"{:.1}\" transform=\"rotate(-90 16 {:.1})\" text-anchor=\"middle\">{}</text>",
            (top + h - bottom) / 2.0,
            (top + h - bottom) / 2.0,
            esc(y_label)
        );
    }

    fn marker(&self, s: &mut String, m: &Marker) {
        let x = self.px(m.x);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>",
            self.top,
            self.h - self.bottom,
            m.colour
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" fill=\"{}\">{}</text>",
            x + 4.0,
            self.top + 12.0,
            m.colour,
            esc(&m.label)
        );
    }

    /// A point: its median with the interval's bar, or a square on the axis when it has
    /// no median, and its label under the axis.
    fn point(&self, s: &mut String, p: &Point) {
        let x = self.px(p.x);
        let c = colour(&p.verdict);
        let base = self.h - self.bottom;
        match p.y {
            Some(y) => {
                if let Some((lo, hi)) = p.ci {
                    let _ = writeln!(
                        s,
                        "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{c}\" stroke-width=\"2\"/>",
                        self.py(lo),
                        self.py(hi)
                    );
                    for yy in [lo, hi] {
                        let _ = writeln!(
                            s,
                            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{c}\" stroke-width=\"2\"/>",
                            x - 4.0,
                            self.py(yy),
                            x + 4.0,
                            self.py(yy)
                        );
                    }
                }
                let _ = writeln!(
                    s,
                    "<circle cx=\"{x:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{c}\"/>",
                    self.py(y)
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"8\" height=\"8\" fill=\"{c}\"/>",
                    x - 4.0,
                    base - 14.0
                );
            }
        }
        let _ = writeln!(
            s,
            "<text x=\"{x:.1}\" y=\"{}\" transform=\"rotate(45 {x:.1} {})\">{}</text>",
            base + 14.0,
            base + 14.0,
            esc(&p.label)
        );
    }
}

fn fmt(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}
