//! `tessera bench --plot FILE.svg`: the bench's two curves as one SVG, side by side.
//!
//! Left: decode ms/token against context, beside the memory-bandwidth floor and
//! transformers (eager and compiled, from --peers). Right: time to first token against
//! prompt length (log-log), beside the GEMM-bound floor and transformers' prefill. Drawn
//! with plotters' SVG backend and its built-in text layout, so no system font is needed.
use super::Report;
use model::ModelError;
use plotters::prelude::*;

fn err(e: impl std::fmt::Display) -> ModelError {
    ModelError::Engine {
        engine: "plot".into(),
        msg: e.to_string(),
    }
}

/// One named curve: (x, y) points (missing values left out).
struct Curve {
    name: &'static str,
    color: RGBColor,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

fn curve(
    name: &'static str,
    color: RGBColor,
    dashed: bool,
    points: impl Iterator<Item = (f64, Option<f64>)>,
) -> Curve {
    Curve {
        name,
        color,
        dashed,
        points: points
            .filter_map(|(x, y)| y.filter(|v| v.is_finite() && *v > 0.0).map(|y| (x, y)))
            .collect(),
    }
}

const TESSERA: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const FLOOR: RGBColor = RGBColor(0x55, 0x55, 0x55);
const HF: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const HF2: RGBColor = RGBColor(0xff, 0x7f, 0x0e);

/// Draws `curves` on a log-log chart in `area`.
fn chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    curves: &[Curve],
) -> Result<(), ModelError>
where
    DB::ErrorType: 'static,
{
    let all: Vec<(f64, f64)> = curves.iter().flat_map(|c| c.points.clone()).collect();
    if all.is_empty() {
        area.titled(&format!("{title}: nothing measured"), ("sans-serif", 16))
            .map_err(err)?;
        return Ok(());
    }
    let fold = |f: fn(f64, f64) -> f64, init: f64, pick: fn(&(f64, f64)) -> f64| {
        all.iter().map(pick).fold(init, f)
    };
    let (x0, x1) = (
        fold(f64::min, f64::MAX, |p| p.0),
        fold(f64::max, 0.0, |p| p.0),
    );
    let (y0, y1) = (
        fold(f64::min, f64::MAX, |p| p.1),
        fold(f64::max, 0.0, |p| p.1),
    );
    let mut ch = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(
            (x0 / 1.3..x1 * 1.3).log_scale(),
            (y0 / 1.5..y1 * 1.5).log_scale(),
        )
        .map_err(err)?;
    ch.configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| short_number(*y))
        .draw()
        .map_err(err)?;
    for c in curves.iter().filter(|c| !c.points.is_empty()) {
        let style = c.color.stroke_width(2);
        let color = c.color;
        if c.dashed {
            ch.draw_series(DashedLineSeries::new(c.points.clone(), 6, 4, style))
                .map_err(err)?
                .label(c.name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        } else {
            ch.draw_series(LineSeries::new(c.points.clone(), style))
                .map_err(err)?
                .label(c.name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
            ch.draw_series(
                c.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, c.color.filled())),
            )
            .map_err(err)?;
        }
    }
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// The report's decode and time-to-first-token curves as an SVG document.
pub fn svg(r: &Report) -> Result<String, ModelError> {
    let decode = [
        curve(
            "tessera (megakernel)",
            TESSERA,
            false,
            r.rows
                .iter()
                .map(|w| (w.context as f64, Some(w.ms_per_token))),
        ),
        curve(
            "bandwidth floor",
            FLOOR,
            true,
            r.rows.iter().map(|w| (w.context as f64, w.floor_ms)),
        ),
        curve(
            "transformers eager",
            HF,
            false,
            r.rows.iter().map(|w| (w.context as f64, w.hf_eager_ms)),
        ),
        curve(
            "transformers compiled",
            HF2,
            false,
            r.rows.iter().map(|w| (w.context as f64, w.hf_compiled_ms)),
        ),
    ];
    let prefill = [
        curve(
            "tessera (prefill)",
            TESSERA,
            false,
            r.prefill_rows
                .iter()
                .map(|p| (p.prompt_tokens as f64, Some(p.ttft_ms))),
        ),
        curve(
            "GEMM-bound floor",
            FLOOR,
            true,
            r.prefill_rows
                .iter()
                .map(|p| (p.prompt_tokens as f64, p.floor_ms)),
        ),
        curve(
            "transformers (bf16, sdpa)",
            HF,
            false,
            r.prefill_rows
                .iter()
                .map(|p| (p.prompt_tokens as f64, p.hf_ms)),
        ),
    ];
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1100, 460)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root
            .titled(
                &format!("tessera bench: {} on {}", short(&r.model), r.device),
                ("sans-serif", 18),
            )
            .map_err(err)?;
        let (left, right) = root.split_horizontally(550);
        chart(
            &left,
            "decode",
            "context (positions)",
            "ms / token",
            &decode,
        )?;
        chart(
            &right,
            "time to first token",
            "prompt tokens",
            "ms",
            &prefill,
        )?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// A tick label with as many decimals as its size needs (100, 2.5, 0.125).
fn short_number(y: f64) -> String {
    match y.abs() {
        a if a >= 10.0 => format!("{y:.0}"),
        a if a >= 1.0 => format!("{y:.1}"),
        _ => format!("{y:.3}"),
    }
}

/// The last path component of a model directory (the title stays short).
fn short(model: &str) -> &str {
    model
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(model)
}
