//! The overview's map: the devices that report a position (an attribute on channel `g`, a String
//! `"lat,lng"` or `"lat,lng,alt"`), drawn as an SVG plot around the project's `mapInfo` centre,
//! so it works without a network; over map tiles when a tile URL template is configured.

use maud::{Markup, html};

const SIZE: f64 = 600.0;
const TILE: f64 = 256.0;

/// A device's position, in decimal degrees.
#[derive(Debug, Clone)]
pub struct Pin {
    pub device: String,
    pub name: String,
    pub lat: f64,
    pub lng: f64,
}

/// `"lat,lng"` or `"lat,lng,alt"` in range; anything else is no position.
pub fn parse_position(text: &str) -> Option<(f64, f64)> {
    let mut parts = text.split(',').map(|p| p.trim().parse::<f64>());
    let lat = parts.next()?.ok()?;
    let lng = parts.next()?.ok()?;
    match parts.next() {
        None | Some(Ok(_)) if parts.next().is_none() => {}
        _ => return None,
    }
    ((-90.0..=90.0).contains(&lat) && (-180.0..=180.0).contains(&lng)).then_some((lat, lng))
}

/// Web Mercator: world pixels at `zoom`.
fn project(lat: f64, lng: f64, zoom: f64) -> (f64, f64) {
    let scale = TILE * 2f64.powf(zoom);
    let x = (lng + 180.0) / 360.0 * scale;
    let s = lat.to_radians().sin().clamp(-0.9999, 0.9999);
    let y = (0.5 - ((1.0 + s) / (1.0 - s)).ln() / (4.0 * std::f64::consts::PI)) * scale;
    (x, y)
}

/// The map and the hint under it. The map draws at most one pin per pixel of its plot, the first
/// by device id of those that fall on it (the rest would be hidden under it anyway), so that
/// its size grows with the pixels covered, not with the fleet; the hint counts every device
/// that reports a position, and the pins drawn when they are fewer.
pub fn section(pins: &[Pin], centre: Option<(f64, f64, f64)>, tiles: Option<&str>) -> Markup {
    let view = View::new(pins, centre);
    let drawn = view.thin(pins);
    html! {
        (svg(&view, &drawn, pins.len(), tiles))
        p.hint id="map-hint" {
            (pins.len()) " devices report a position."
            @if drawn.len() < pins.len() {
                " " (drawn.len()) " pins are drawn: one where several share a pixel, none outside the map."
            }
        }
    }
}

/// What the map shows: its top left corner in world pixels, at `zoom`.
struct View {
    origin: (f64, f64),
    zoom: f64,
}

impl View {
    /// Centred on `centre` (lat, lng, zoom), else on the pins.
    fn new(pins: &[Pin], centre: Option<(f64, f64, f64)>) -> View {
        let (lat, lng, zoom) = centre.unwrap_or_else(|| fit(pins));
        let (cx, cy) = project(lat, lng, zoom);
        View {
            origin: (cx - SIZE / 2.0, cy - SIZE / 2.0),
            zoom,
        }
    }

    /// Where a position falls on the map, if on it.
    fn at(&self, lat: f64, lng: f64) -> Option<(f64, f64)> {
        let (x, y) = project(lat, lng, self.zoom);
        let (x, y) = (x - self.origin.0, y - self.origin.1);
        ((0.0..=SIZE).contains(&x) && (0.0..=SIZE).contains(&y)).then_some((x, y))
    }

    /// The pins on the map with where they fall, one per pixel: the first by device id.
    fn thin<'p>(&self, pins: &'p [Pin]) -> Vec<(&'p Pin, f64, f64)> {
        let mut by_id: Vec<&Pin> = pins.iter().collect();
        by_id.sort_by(|a, b| a.device.cmp(&b.device));
        let mut taken = std::collections::HashSet::new();
        by_id
            .into_iter()
            .filter_map(|pin| {
                let (x, y) = self.at(pin.lat, pin.lng)?;
                taken
                    .insert((x.floor() as i32, y.floor() as i32))
                    .then_some((pin, x, y))
            })
            .collect()
    }
}

/// The map with the pins `drawn` (placed by `View::thin`) of `reporting` positions; tiles from
/// `tiles` when set.
fn svg(view: &View, drawn: &[(&Pin, f64, f64)], reporting: usize, tiles: Option<&str>) -> Markup {
    html! {
        svg.map viewBox={ "0 0 " (SIZE) " " (SIZE) } role="img" aria-label={ (reporting) " devices with a position" } {
            rect.ground x="0" y="0" width=(SIZE) height=(SIZE) {}
            @if let Some(template) = tiles { (tile_images(template, view.origin, view.zoom)) }
            @else {
                @for i in 1..6 {
                    line.grid x1=(f64::from(i) * 100.0) y1="0" x2=(f64::from(i) * 100.0) y2=(SIZE) {}
                    line.grid x1="0" y1=(f64::from(i) * 100.0) x2=(SIZE) y2=(f64::from(i) * 100.0) {}
                }
            }
            @for (pin, x, y) in drawn {
                a href={ "/console/devices/" (pin.device) } {
                    circle.pin cx=(format!("{x:.1}")) cy=(format!("{y:.1}")) r="7" { title { (pin.name) " " (pin.lat) "," (pin.lng) } }
                }
            }
        }
    }
}

/// A centre and zoom that show every pin.
fn fit(pins: &[Pin]) -> (f64, f64, f64) {
    if pins.is_empty() {
        return (0.0, 0.0, 1.0);
    }
    let (lats, lngs): (Vec<f64>, Vec<f64>) = pins.iter().map(|p| (p.lat, p.lng)).unzip();
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lat, lng) = ((min(&lats) + max(&lats)) / 2.0, (min(&lngs) + max(&lngs)) / 2.0);
    let zoom = (0..=18)
        .rev()
        .find(|&z| {
            let z = f64::from(z);
            let (x0, y0) = project(max(&lats), min(&lngs), z);
            let (x1, y1) = project(min(&lats), max(&lngs), z);
            (x1 - x0) < SIZE * 0.8 && (y1 - y0) < SIZE * 0.8
        })
        .unwrap_or(1);
    (lat, lng, f64::from(zoom))
}

/// The tiles that cover the view, from a `{z}/{x}/{y}` template.
fn tile_images(template: &str, origin: (f64, f64), zoom: f64) -> Markup {
    let z = zoom.round();
    let count = 2f64.powf(z);
    let first = ((origin.0 / TILE).floor(), (origin.1 / TILE).floor());
    let mut tiles = Vec::new();
    for dx in 0..4 {
        for dy in 0..4 {
            let (tx, ty) = (first.0 + f64::from(dx), first.1 + f64::from(dy));
            if ty < 0.0 || ty >= count {
                continue;
            }
            let url = template
                .replace("{z}", &z.to_string())
                .replace("{x}", &tx.rem_euclid(count).to_string())
                .replace("{y}", &ty.to_string());
            tiles.push((tx * TILE - origin.0, ty * TILE - origin.1, url));
        }
    }
    html! {
        @for (x, y, url) in tiles {
            image href=(url) x=(format!("{x:.0}")) y=(format!("{y:.0}")) width="256" height="256" {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions() {
        assert_eq!(parse_position("31.23,121.47"), Some((31.23, 121.47)));
        assert_eq!(parse_position("31.23, 121.47, 12"), Some((31.23, 121.47)));
        for bad in ["", "31.23", "a,b", "91,0", "0,181", "1,2,3,4"] {
            assert_eq!(parse_position(bad), None, "{bad}");
        }
    }

    fn pin(device: &str, lat: f64, lng: f64) -> Pin {
        Pin {
            device: device.into(),
            name: format!("name of {device}"),
            lat,
            lng,
        }
    }

    #[test]
    fn the_centre_is_in_the_middle() {
        let svg = section(&[pin("d", 31.2, 121.5)], Some((31.2, 121.5, 12.0)), None).into_string();
        assert!(svg.contains(r#"cx="300.0" cy="300.0""#), "{svg}");
        assert!(svg.contains("1 devices report a position.</p>"), "{svg}");
    }

    #[test]
    fn pins_are_thinned_to_one_per_pixel() {
        // At zoom 12 a pixel is about 26 m at this latitude (1e-5 degrees is about 1 m): a
        // 100 by 100 grid 1 m apart shares a few pixels; ten pins far apart keep theirs.
        let centre = Some((31.2, 121.5, 12.0));
        let mut pins: Vec<Pin> = (0..10_000)
            .map(|i| {
                pin(
                    &format!("d{i:05}"),
                    31.2 + f64::from(i / 100) * 1e-5,
                    121.5 + f64::from(i % 100) * 1e-5,
                )
            })
            .collect();
        pins.extend((0..10).map(|i| pin(&format!("far{i}"), 31.2 - f64::from(i) * 0.005, 121.45)));
        // one outside the map
        pins.push(pin("away", -31.2, 0.0));
        let view = View::new(&pins, centre);
        let drawn = view.thin(&pins);
        let cells: std::collections::HashSet<(i32, i32)> = drawn
            .iter()
            .map(|(_, x, y)| (x.floor() as i32, y.floor() as i32))
            .collect();
        assert_eq!(cells.len(), drawn.len(), "one pin per pixel");
        assert!(drawn.len() < 30, "the grid shares a few pixels: {}", drawn.len());
        let names: Vec<String> = drawn.iter().map(|(p, _, _)| p.device.clone()).collect();
        assert!(
            names.contains(&"d00000".to_owned()),
            "the first by id is kept: {names:?}"
        );
        assert_eq!(names.iter().filter(|n| n.starts_with("far")).count(), 10);
        assert!(!names.contains(&"away".to_owned()));
        // the same pins in another order draw the same
        pins.reverse();
        let again: Vec<String> = view.thin(&pins).iter().map(|(p, _, _)| p.device.clone()).collect();
        assert_eq!(again, names);

        let html = section(&pins, centre, None).into_string();
        assert_eq!(html.matches("<circle").count(), names.len());
        assert!(
            html.contains(&format!(
                "10011 devices report a position. {} pins are drawn",
                names.len()
            )),
            "{html}"
        );
    }
}
