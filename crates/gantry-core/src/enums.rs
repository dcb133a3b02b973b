//! The closed sets of the specification, spelled exactly as it spells them.

use serde::{Deserialize, Serialize};

macro_rules! string_enum {
    (#[doc = $doc:literal] $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant),+
        }

        // Written by hand rather than derived: the schema's enum must list the serde spellings,
        // which the derive misses for variants renamed inside a macro.
        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .description(Some($doc.trim()))
                    .enum_values(Some(Self::ALL.iter().map(|v| v.as_str())))
                    .into()
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed(stringify!($name))
            }
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire and stored spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }

            /// Parses a query or stored value, naming `field` in the error.
            pub fn parse_field(text: &str, field: &str) -> crate::Result<Self> {
                Self::parse(text).ok_or_else(|| crate::Error::invalid(
                    field,
                    format!("`{text}` is not one of {}", Self::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")),
                ))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// The kind of machine a model describes.
    DeviceType {
        Root = "ROOT", Light = "Light", Camera = "Camera", BallCamera = "BallCamera",
        GunCamera = "GunCamera", LocationTracker = "LocationTracker",
        PersonalTracker = "PersonalTracker", Helmet = "Helmet", VehicleTracker = "VehicleTracker",
        AecMachinery = "AECMachinery", Vehicle = "Vehicle", MiningMachinery = "MiningMachinery",
        Excavator = "Excavator", Crane = "Crane", TowerCrane = "TowerCrane", Elevator = "Elevator",
        CompactionMachinery = "CompactionMachinery", PileDrivingMachinery = "PileDrivingMachinery",
        ConcreteMachinery = "ConcreteMachinery", ConcreteMixingStation = "ConcreteMixingStation",
        SteelMachine = "SteelMachine", RoadMachine = "RoadMachine",
        DrillingMachinery = "DrillingMachinery", DecorationMachinery = "DecorationMachinery",
        TunnelingMachinery = "TunnelingMachinery", ShieldMachine = "ShieldMachine",
        EnvironmentControlEquipment = "EnvironmentControlEquipment",
        WeightingEquipment = "WeightingEquipment", Hvac = "HVAC", Gateway = "GATEWAY",
    }
);

string_enum!(
    /// The type of an attribute or action parameter value.
    DataType { Integer = "Integer", Float = "Float", String = "String", Boolean = "Boolean" }
);

string_enum!(
    /// Direction of an attribute: R upstream only, W downstream only, RW both.
    Readable { R = "R", Rw = "RW", W = "W" }
);

string_enum!(
    /// m ordinary message, w alarm, g geographic location.
    Channel { M = "m", W = "w", G = "g" }
);

string_enum!(
    /// Whether a device may work (Active) or is shut out (Locked).
    DeviceStatus { Active = "Active", Locked = "Locked" }
);

string_enum!(
    /// development (in preparation), product (in progress), closed (finished).
    ProjectStatus { Development = "development", Product = "product", Closed = "closed" }
);

string_enum!(
    /// ASC or DESC.
    SortOrder { Asc = "ASC", Desc = "DESC" }
);

string_enum!(
    /// Where an event came from.
    EventSource { SourceDevice = "source_device", SourceRest = "source_rest" }
);

string_enum!(
    /// Message types: m measurement, log, ack response, c configuration command.
    MessageType { M = "m", Log = "log", Ack = "ack", C = "c" }
);

string_enum!(
    /// State of an event log: a control waiting for its ack, done, or failed (no ack in time).
    EventLogStatus { Processing = "processing", Completed = "completed", Exception = "exception" }
);

string_enum!(
    /// What the device made of a desired value: not yet sent, sent without an answer, applied, or refused by the device (`reason` says why).
    DesiredStatus { Pending = "pending", Delivered = "delivered", Applied = "applied", Rejected = "rejected" }
);

string_enum!(
    /// What an event log records: a control message sent down, or a device's response.
    Classification { DeviceControll = "DeviceControll", Response = "Response" }
);

string_enum!(
    /// Who a route is for: an application, a web page, or another device.
    SourceType { App = "APP", Web = "WEB", Device = "DEVICE" }
);

string_enum!(
    /// A webhook delivery: still to be delivered (or retried), delivered (a 2xx), or failed (given up).
    DeliveryStatus { Pending = "pending", Delivered = "delivered", Failed = "failed" }
);

string_enum!(
    /// How grave an alarm is, from the gravest: CRITICAL, MAJOR, MINOR, WARNING.
    Severity { Critical = "CRITICAL", Major = "MAJOR", Minor = "MINOR", Warning = "WARNING" }
);

string_enum!(
    /// An alarm raised and not yet seen (ACTIVE), raised and seen (ACKNOWLEDGED), or over (CLEARED).
    AlarmStatus { Active = "ACTIVE", Acknowledged = "ACKNOWLEDGED", Cleared = "CLEARED" }
);

string_enum!(
    /// What raised an alarm: a rule of the device's model, or the device itself (channel w).
    AlarmSource { Rule = "RULE", Device = "DEVICE" }
);

string_enum!(
    /// One entry of an alarm's history.
    AlarmTransition {
        Raised = "RAISED", Escalated = "ESCALATED", Deescalated = "DEESCALATED",
        Acknowledged = "ACKNOWLEDGED", Commented = "COMMENTED", Cleared = "CLEARED",
    }
);

impl Severity {
    /// Higher is graver.
    pub fn rank(self) -> u8 {
        match self {
            Severity::Critical => 4,
            Severity::Major => 3,
            Severity::Minor => 2,
            Severity::Warning => 1,
        }
    }
}

impl DataType {
    /// Whether a JSON value is of this type: Integer an i64, Float any number, String a string,
    /// Boolean true or false.
    pub fn accepts(self, value: &serde_json::Value) -> bool {
        match self {
            DataType::Integer => value.is_i64() || value.is_u64() && value.as_i64().is_some(),
            DataType::Float => value.is_number(),
            DataType::String => value.is_string(),
            DataType::Boolean => value.is_boolean(),
        }
    }
}

impl DataType {
    /// Checks that `value` is of this type, naming `field` in the error.
    pub fn check(self, field: &str, value: &serde_json::Value) -> crate::Result<()> {
        if self.accepts(value) {
            Ok(())
        } else {
            Err(crate::Error::invalid(
                field,
                format!("`{value}` is not a value of type {self}"),
            ))
        }
    }
}

impl Readable {
    /// Whether values of the attribute may be sent down to the device.
    pub fn writable(self) -> bool {
        matches!(self, Readable::W | Readable::Rw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spellings_round_trip() {
        for t in DeviceType::ALL {
            assert_eq!(DeviceType::parse(t.as_str()), Some(*t));
            assert_eq!(serde_json::to_value(t).unwrap(), json!(t.as_str()));
        }
        assert_eq!(DeviceType::parse("AECMachinery"), Some(DeviceType::AecMachinery));
        assert_eq!(DeviceType::parse("Toaster"), None);
        assert_eq!(DeviceType::ALL.len(), 30);
    }

    #[test]
    fn data_types_accept_their_values() {
        assert!(DataType::Integer.accepts(&json!(7)));
        assert!(!DataType::Integer.accepts(&json!(7.5)));
        assert!(!DataType::Integer.accepts(&json!(u64::MAX)));
        assert!(DataType::Float.accepts(&json!(7)));
        assert!(DataType::Float.accepts(&json!(7.5)));
        assert!(!DataType::Float.accepts(&json!("7.5")));
        assert!(DataType::String.accepts(&json!("x")));
        assert!(DataType::Boolean.accepts(&json!(false)));
        assert!(!DataType::Boolean.accepts(&json!("yes")));
    }
}
