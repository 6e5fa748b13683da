//! The figures the README shows, as a newcomer sees them: a README column is at most
//! [`README_WIDTH`] px wide and scales a wider image down, so every figure's smallest text
//! must still read at [`MIN_TEXT_PX`] or more at that width; and wherever LazyB is drawn as a
//! line, it is the strong red no other line takes. (`scripts/readme-figures.sh` renders them
//! to PNG at that width, to look at.)

use std::path::Path;

/// The widest a README shows an image (GitHub's column; wider images are scaled down to it).
const README_WIDTH: f64 = 830.0;
/// The smallest text a reader can read at that width, px.
const MIN_TEXT_PX: f64 = 11.0;
/// LazyB's colour in every line figure (`plot::HEADLINE`).
const LAZYB: &str = "#D62728";

/// The SVG figures the README shows, in order.
fn readme_figures() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    readme
        .lines()
        .filter_map(|l| {
            let at = l.find("](docs/figures/")?;
            let rest = &l[at + 2..];
            Some(rest[..rest.find(')')?].to_string())
        })
        .filter(|f| f.ends_with(".svg"))
        .collect()
}

/// The width of an SVG and the smallest font size of its text, px.
fn width_and_smallest_text(svg: &str) -> (f64, f64) {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let root = doc.root_element();
    let width: f64 = root.attribute("width").unwrap().parse().unwrap();
    let smallest = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && !n.text().unwrap_or("").trim().is_empty())
        .filter_map(|n| n.attribute("font-size")?.parse::<f64>().ok())
        .fold(f64::INFINITY, f64::min);
    (width, smallest)
}

#[test]
fn every_readme_figure_reads_at_the_readme_s_width_and_draws_lazyb_in_its_colour() {
    let figures = readme_figures();
    assert!(figures.len() >= 6, "{figures:?}");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    for f in &figures {
        let svg = std::fs::read_to_string(dir.join(f)).unwrap();
        let (width, smallest) = width_and_smallest_text(&svg);
        let shown = smallest * (README_WIDTH / width).min(1.0);
        assert!(
            shown >= MIN_TEXT_PX,
            "{f}: {width} px wide, its smallest text {smallest:.1} px reads at {shown:.1} px at the README's {README_WIDTH} px (at least {MIN_TEXT_PX}): regenerate it (scripts/figures.sh)"
        );
        // a line figure with LazyB in it draws LazyB's line in its colour
        let names_lazyb = svg.contains(">\nLazyB\n<")
            || svg.contains(">\nlazy\n<")
            || svg.contains(">\nLazyB (")
            || svg.contains(">\nlazy (");
        if names_lazyb && svg.contains("<polyline") {
            assert!(
                svg.contains(&format!("stroke=\"{LAZYB}\"")),
                "{f}: LazyB is not drawn in {LAZYB}"
            );
        }
    }
}

#[test]
fn the_width_check_catches_a_wide_figure_of_small_text() {
    // the three-panel figure the README showed until 2026-12: 1,944 px wide, 10.5 px text
    let old = r#"<svg width="1944" height="440" xmlns="http://www.w3.org/2000/svg"><text font-size="10.483870967741936">x</text><text font-size="14.5">y</text></svg>"#;
    let (w, s) = width_and_smallest_text(old);
    assert_eq!(w, 1944.0);
    assert!(s * README_WIDTH / w < MIN_TEXT_PX);
}
