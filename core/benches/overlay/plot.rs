//! `--plot FILE.png`: mean hops against N, beside 0.5·log2 N.

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

/// Draws `points` (N, mean hops) and the 0.5·log2 N reference on a log2 N axis.
pub(crate) fn hops_vs_n(path: &str, title: &str, points: &[(usize, f64)]) -> Result<(), String> {
    register_font()?;
    let err = |e: &dyn std::fmt::Display| format!("plotting {path}: {e}");
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let max_x = points.iter().map(|p| (p.0 as f64).log2()).fold(1.0, f64::max).ceil();
    let max_y = points.iter().map(|p| p.1).fold(0.5 * max_x, f64::max).ceil() + 0.5;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_x, 0.0..max_y)
        .map_err(|e| err(&e))?;
    chart.configure_mesh().x_desc("log2 N (nodes)").y_desc("hops per lookup").draw().map_err(|e| err(&e))?;
    let measured: Vec<(f64, f64)> = points.iter().map(|(n, h)| ((*n as f64).log2(), *h)).collect();
    chart
        .draw_series(LineSeries::new(measured.clone(), BLUE.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label("measured mean hops")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart.draw_series(measured.iter().map(|p| Circle::new(*p, 4, BLUE.filled()))).map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new((0..=(max_x as usize * 10)).map(|i| (i as f64 / 10.0, i as f64 / 20.0)), RED))
        .map_err(|e| err(&e))?
        .label("0.5 · log2 N")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Draws the churn curve: lookup success (%) and mean hops per time bucket.
pub(crate) fn churn(path: &str, rows: &[(f64, f64, f64, usize)]) -> Result<(), String> {
    register_font()?;
    let err = |e: &dyn std::fmt::Display| format!("plotting {path}: {e}");
    let root = BitMapBackend::new(path, (900, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically(350);
    let max_t = rows.iter().map(|r| r.0).fold(1.0, f64::max);
    let floor = rows.iter().map(|r| r.1).fold(90.0, f64::min).floor();
    let mut a = ChartBuilder::on(&top)
        .caption("Chord under churn: lookup success", ("sans-serif", 20))
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
