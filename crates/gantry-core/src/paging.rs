//! Paged listings: the request (`pageNo`, `pageSize`) and the page of records it selects.

use crate::{Error, Result};

pub const DEFAULT_PAGE_SIZE: u32 = 20;
pub const MAX_PAGE_SIZE: u32 = 1000;

/// A valid page request: `page_no` from 1, `page_size` in 1..=1000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub page_no: u32,
    pub page_size: u32,
}

impl PageRequest {
    /// Checks the raw query values, applying `default_size` when `pageSize` is absent.
    pub fn parse(page_no: Option<i64>, page_size: Option<i64>, default_size: u32) -> Result<Self> {
        let page_no = page_no.unwrap_or(1);
        if page_no < 1 || page_no > i64::from(u32::MAX) {
            return Err(Error::invalid("pageNo", "must be a whole number from 1"));
        }
        let page_size = page_size.unwrap_or(i64::from(default_size));
        if !(1..=i64::from(MAX_PAGE_SIZE)).contains(&page_size) {
            return Err(Error::invalid(
                "pageSize",
                format!("must be a whole number from 1 to {MAX_PAGE_SIZE}"),
            ));
        }
        Ok(Self {
            page_no: page_no as u32,
            page_size: page_size as u32,
        })
    }

    pub fn offset(&self) -> i64 {
        (i64::from(self.page_no) - 1) * i64::from(self.page_size)
    }

    pub fn limit(&self) -> i64 {
        i64::from(self.page_size)
    }
}

/// One page of a listing and the total number of records the listing holds.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub request: PageRequest,
    pub total: u64,
    pub items: Vec<T>,
}

impl<T> Page<T> {
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            request: self.request,
            total: self.total,
            items: self.items.into_iter().map(f).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bounds() {
        assert_eq!(
            PageRequest::parse(None, None, 20).unwrap(),
            PageRequest {
                page_no: 1,
                page_size: 20
            }
        );
        assert_eq!(PageRequest::parse(None, None, 100).unwrap().page_size, 100);
        assert_eq!(PageRequest::parse(Some(3), Some(7), 20).unwrap().offset(), 14);
        assert!(
            PageRequest::parse(Some(0), None, 20)
                .unwrap_err()
                .to_string()
                .starts_with("pageNo")
        );
        assert!(
            PageRequest::parse(None, Some(-5), 20)
                .unwrap_err()
                .to_string()
                .starts_with("pageSize")
        );
        assert!(PageRequest::parse(None, Some(1001), 20).is_err());
        assert!(PageRequest::parse(None, Some(1000), 20).is_ok());
    }
}
