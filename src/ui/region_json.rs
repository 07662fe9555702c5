//! The page's view of the region: the members, the floor, whether the global store answers,
//! and the units of global limits this replica enforces with their portions.

use serde_json::{Value, json};

use crate::region::{RegionFigures, UnitKind};

/// The region's figures; `{"region": null}` on a server that is not one of several regions.
pub(super) fn region(figures: Option<&RegionFigures>) -> Value {
    let Some(f) = figures else {
        return json!({ "region": null });
    };
    json!({
        "region": f.region,
        "members": f.members,
        "floor": f.floor,
        "reachable": f.reachable,
        "last_answer_ms": f.last_answer_ago.map(|n| n / 1_000_000),
        "failing": f.failing.as_ref().map(|(_, why)| why),
        "units": f.units,
        "busiest": f.busiest.iter().map(|u| json!({
            "domain": &*u.domain,
            "rule": &*u.rule,
            "kind": match u.kind {
                UnitKind::Counter => "counter",
                UnitKind::Bucket => "bucket",
            },
            "name": u.name,
            "demand_per_second": u.demand,
            "region_demand_per_second": u.region_demand,
            "others_demand_per_second": u.others_demand,
            "portion": u.portion,
            "claimed": u.claimed,
        })).collect::<Vec<_>>(),
    })
}
