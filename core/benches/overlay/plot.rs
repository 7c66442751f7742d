//! `--plot FILE.png`: mean hops against N beside the theory (one curve per overlay
//! and shape), and the churn curve.

use plotters::prelude::*;

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers a system font for labels; plotters' ab_glyph backend has none built in.
fn register_font() -> Result<(), String> {
    for p in FONT_PATHS {
        if let Ok(bytes) = std::fs::read(p) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{p} is not a usable font"));
        }
    }
    Err("no DejaVuSans.ttf found (apt-get install fonts-dejavu-core)".into())
}

/// One measured curve and the theory it is held against.
pub(crate) struct Series {
    pub(crate) label: String,
    /// (N, mean hops) as measured.
    pub(crate) points: Vec<(usize, f64)>,
    /// Mean hops the theory expects at N.
    pub(crate) theory: fn(usize, usize) -> f64,
    /// CAN's dimensions (the theory's argument), 0 for Chord.
    pub(crate) dims: usize,
}

const COLOURS: [RGBColor; 6] = [BLUE, RED, RGBColor(0, 150, 0), MAGENTA, RGBColor(230, 140, 0), CYAN];

/// Draws every series (N, mean hops) as points joined by a line, each beside its
/// theory (dashed, same colour), on a log2 N axis and a log hops axis.
pub(crate) fn hops_vs_n(path: &str, title: &str, series: &[Series]) -> Result<(), String> {
    register_font()?;
    let err = |e: &dyn std::fmt::Display| format!("plotting {path}: {e}");
    let root = BitMapBackend::new(path, (1000, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let all = series.iter().flat_map(|s| s.points.iter());
    let max_x = all.clone().map(|p| (p.0 as f64).log2()).fold(1.0, f64::max).ceil();
    let max_y = all.map(|p| p.1).fold(2.0, f64::max) * 2.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_x, (0.1..max_y).log_scale())
        .map_err(|e| err(&e))?;
    chart.configure_mesh().x_desc("log2 N (nodes)").y_desc("hops per lookup").draw().map_err(|e| err(&e))?;
    for (k, s) in series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let measured: Vec<(f64, f64)> = s.points.iter().map(|(n, h)| ((*n as f64).log2(), h.max(0.1))).collect();
        chart
            .draw_series(LineSeries::new(measured.clone(), colour.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        chart.draw_series(measured.iter().map(|p| Circle::new(*p, 3, colour.filled()))).map_err(|e| err(&e))?;
        let lo = s.points.iter().map(|p| p.0).min().unwrap_or(2).max(2) as f64;
        let hi = s.points.iter().map(|p| p.0).max().unwrap_or(2) as f64;
        let theory: Vec<(f64, f64)> = (0..=100)
            .map(|i| lo * (hi / lo).powf(i as f64 / 100.0))
            .map(|n| (n.log2(), (s.theory)(s.dims, n as usize).max(0.1)))
            .collect();
        chart.draw_series(DashedLineSeries::new(theory, 6, 4, colour.stroke_width(1))).map_err(|e| err(&e))?;
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Draws the churn curve: lookup success (%) and mean hops per time bucket.
pub(crate) fn churn(path: &str, overlay: &str, rows: &[(f64, f64, f64, usize)]) -> Result<(), String> {
    register_font()?;
    let err = |e: &dyn std::fmt::Display| format!("plotting {path}: {e}");
    let root = BitMapBackend::new(path, (900, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically(350);
    let max_t = rows.iter().map(|r| r.0).fold(1.0, f64::max);
    let floor = rows.iter().map(|r| r.1).fold(90.0, f64::min).floor();
    let mut a = ChartBuilder::on(&top)
        .caption(format!("{overlay} under churn: lookup success"), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_t, floor..100.5)
        .map_err(|e| err(&e))?;
    a.configure_mesh().y_desc("success %").draw().map_err(|e| err(&e))?;
    a.draw_series(LineSeries::new(rows.iter().map(|r| (r.0, r.1)), BLUE)).map_err(|e| err(&e))?;
    let max_n = rows.iter().map(|r| r.3).max().unwrap_or(1) as f64;
    let max_h = rows.iter().map(|r| r.2).fold(1.0, f64::max).ceil();
    let mut b = ChartBuilder::on(&bottom)
        .caption("mean hops (blue) and live nodes (green, scaled)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_t, 0.0..max_h + 1.0)
        .map_err(|e| err(&e))?;
    b.configure_mesh().x_desc("virtual seconds").draw().map_err(|e| err(&e))?;
    b.draw_series(LineSeries::new(rows.iter().map(|r| (r.0, r.2)), BLUE)).map_err(|e| err(&e))?;
    b.draw_series(LineSeries::new(rows.iter().map(|r| (r.0, r.3 as f64 / max_n * max_h)), GREEN))
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
