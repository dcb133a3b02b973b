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

/// The map: centred on `centre` (lat, lng, zoom), else on the pins; tiles from `tiles` when set.
pub fn svg(pins: &[Pin], centre: Option<(f64, f64, f64)>, tiles: Option<&str>) -> Markup {
    let (lat, lng, zoom) = centre.unwrap_or_else(|| fit(pins));
    let (cx, cy) = project(lat, lng, zoom);
    let origin = (cx - SIZE / 2.0, cy - SIZE / 2.0);
    let at = |lat: f64, lng: f64| {
        let (x, y) = project(lat, lng, zoom);
        (x - origin.0, y - origin.1)
    };
    html! {
        svg.map viewBox={ "0 0 " (SIZE) " " (SIZE) } role="img" aria-label={ (pins.len()) " devices with a position" } {
            rect.ground x="0" y="0" width=(SIZE) height=(SIZE) {}
            @if let Some(template) = tiles { (tile_images(template, origin, zoom)) }
            @else {
                @for i in 1..6 {
                    line.grid x1=(f64::from(i) * 100.0) y1="0" x2=(f64::from(i) * 100.0) y2=(SIZE) {}
                    line.grid x1="0" y1=(f64::from(i) * 100.0) x2=(SIZE) y2=(f64::from(i) * 100.0) {}
                }
            }
            @for pin in pins {
                @let (x, y) = at(pin.lat, pin.lng);
                @if (0.0..=SIZE).contains(&x) && (0.0..=SIZE).contains(&y) {
                    a href={ "/console/devices/" (pin.device) } {
                        circle.pin cx=(format!("{x:.1}")) cy=(format!("{y:.1}")) r="7" { title { (pin.name) " " (pin.lat) "," (pin.lng) } }
                    }
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

    #[test]
    fn the_centre_is_in_the_middle() {
        let pin = Pin {
            device: "d".into(),
            name: "n".into(),
            lat: 31.2,
            lng: 121.5,
        };
        let svg = svg(&[pin], Some((31.2, 121.5, 12.0)), None).into_string();
        assert!(svg.contains(r#"cx="300.0" cy="300.0""#), "{svg}");
    }
}
