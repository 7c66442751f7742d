//! The latency/bandwidth plot (PNG): half round trip against message size, one
//! line per system, both axes logarithmic.

use plotters::prelude::*;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Draws `series` (name, [(size in bytes, µs)]) into `path`.
pub(crate) fn latency(path: &std::path::Path, series: &[(String, Vec<(f64, f64)>)]) -> Result<(), String> {
    let bytes = std::fs::read(FONT).map_err(|e| format!("{FONT}: {e}"))?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| "bad font".to_string())?;
    let err = |e: &dyn std::fmt::Display| format!("plotting: {e}");
    let root = BitMapBackend::new(path, (1000, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let pts = series.iter().flat_map(|s| s.1.iter());
    let max_y = pts.clone().map(|p| p.1).fold(1.0, f64::max) * 1.5;
    let min_y = pts.map(|p| p.1).fold(max_y, f64::min).max(0.01) / 1.5;
    let mut chart = ChartBuilder::on(&root)
        .caption("ping-pong, half round trip (lower is better)", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1.0f64..5e6f64).log_scale(), (min_y..max_y).log_scale())
        .map_err(|e| err(&e))?;
    chart.configure_mesh().x_desc("message size (bytes)").y_desc("µs").draw().map_err(|e| err(&e))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
