//! Topic names: `P/in/json/<device>` upstream, `P/out/json/<device>` a device's inbox.

/// The topics of one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    prefix: String,
}

impl Topics {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.trim_end_matches('/').to_owned(),
        }
    }

    /// Where a device publishes its measurements, logs and acks.
    pub fn upstream(&self, device: &str) -> String {
        format!("{}/in/json/{device}", self.prefix)
    }

    /// Where a device receives control and routed messages.
    pub fn inbox(&self, device: &str) -> String {
        format!("{}/out/json/{device}", self.prefix)
    }

    /// Whether `topic` is exactly the upstream topic of `device`.
    pub fn is_upstream_of(&self, topic: &str, device: &str) -> bool {
        self.split(topic, "in") == Some(device)
    }

    /// Whether `filter` is exactly the inbox of `device` (no wildcards).
    pub fn is_inbox_of(&self, filter: &str, device: &str) -> bool {
        self.split(filter, "out") == Some(device)
    }

    /// Whose upstream topic `topic` is, if it is one.
    pub fn upstream_owner<'t>(&self, topic: &'t str) -> Option<&'t str> {
        self.split(topic, "in")
    }

    /// The shared subscription through which the nodes of `group` split the upstream traffic.
    pub fn shared_upstream(&self, group: &str) -> String {
        format!("$share/{group}/{}/in/json/+", self.prefix)
    }

    /// Whose inbox `topic` is, if it is one.
    pub fn inbox_owner<'t>(&self, topic: &'t str) -> Option<&'t str> {
        self.split(topic, "out")
    }

    fn split<'t>(&self, topic: &'t str, direction: &str) -> Option<&'t str> {
        let rest = topic.strip_prefix(self.prefix.as_str())?.strip_prefix('/')?;
        let rest = rest.strip_prefix(direction)?.strip_prefix("/json/")?;
        (!rest.is_empty() && !rest.contains(['/', '+', '#'])).then_some(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_of_a_device() {
        let t = Topics::new("gantry");
        assert_eq!(t.upstream("d1"), "gantry/in/json/d1");
        assert_eq!(t.inbox("d1"), "gantry/out/json/d1");
        assert!(t.is_upstream_of("gantry/in/json/d1", "d1"));
        assert!(!t.is_upstream_of("gantry/in/json/d2", "d1"));
        assert!(!t.is_upstream_of("gantry/out/json/d1", "d1"));
        assert!(!t.is_upstream_of("gantry/in/json/d1/x", "d1"));
        assert!(!t.is_upstream_of("other/in/json/d1", "d1"));
        assert!(t.is_inbox_of("gantry/out/json/d1", "d1"));
        for filter in [
            "#",
            "gantry/#",
            "gantry/out/json/+",
            "gantry/out/json/#",
            "gantry/out/json/d2",
            "gantry/in/json/d1",
        ] {
            assert!(!t.is_inbox_of(filter, "d1"), "{filter}");
        }
        assert_eq!(Topics::new("site/a/").inbox("d"), "site/a/out/json/d");
        assert_eq!(t.inbox_owner("gantry/out/json/d7"), Some("d7"));
        assert_eq!(t.inbox_owner("gantry/in/json/d7"), None);
        assert_eq!(t.upstream_owner("gantry/in/json/d7"), Some("d7"));
        assert_eq!(t.shared_upstream("g"), "$share/g/gantry/in/json/+");
    }
}
