//! Wall-clock formatting in local time (via `localtime_r`) and UTC, without a date crate.

use std::time::{SystemTime, UNIX_EPOCH};

use super::sync;

/// Broken-down local time of a Unix timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Local {
    pub(crate) year: i32,
    pub(crate) month: u32,
    pub(crate) day: u32,
    pub(crate) hour: u32,
    pub(crate) minute: u32,
    pub(crate) second: u32,
    /// Offset from UTC in seconds (east positive).
    pub(crate) offset: i64,
}

impl Local {
    /// `YYYY-MM-DD<sep>HH:MM:SS`.
    pub(crate) fn ymd_hms(&self, sep: char) -> String {
        format!(
            "{:04}-{:02}-{:02}{sep}{:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// `+HH:MM` (or `+HHMM` without `colon`).
    pub(crate) fn offset_str(&self, colon: bool) -> String {
        let sign = if self.offset < 0 { '-' } else { '+' };
        let off = self.offset.abs();
        let colon = if colon { ":" } else { "" };
        format!("{sign}{:02}{colon}{:02}", off / 3600, off % 3600 / 60)
    }
}

/// Seconds since the epoch as a float (the original's `time.time()`).
pub(crate) fn now_epoch() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Milliseconds since the epoch.
pub(crate) fn now_millis() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

/// Local broken-down time for `secs` since the epoch.
pub(crate) fn local(secs: i64) -> Local {
    // Every log line and history append asks for the current second; glibc's conversion
    // (a lock and the zone rules) is most of their time, so the last answer is kept.
    static LAST: std::sync::Mutex<Option<(i64, Local)>> = std::sync::Mutex::new(None);
    let mut last = sync::lock(&LAST);
    if let Some((s, t)) = *last {
        if s == secs {
            return t;
        }
    }
    let t = convert(secs);
    *last = Some((secs, t));
    t
}

fn convert(secs: i64) -> Local {
    #[cfg(unix)]
    {
        let t: libc::time_t = secs as libc::time_t;
        // SAFETY: `tm` is plain data; localtime_r only writes into it and reads `t`. Raw libc:
        // nix and std wrap no local-time call, and a time-zone crate would be far larger.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        // SAFETY: as above: `t` and `tm` are valid for the call; localtime_r keeps no pointer.
        let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
        if ok {
            return Local {
                year: tm.tm_year + 1900,
                month: (tm.tm_mon + 1) as u32,
                day: tm.tm_mday as u32,
                hour: tm.tm_hour as u32,
                minute: tm.tm_min as u32,
                second: tm.tm_sec as u32,
                offset: tm.tm_gmtoff,
            };
        }
    }
    utc(secs)
}

/// UTC broken-down time (civil-from-days, proleptic Gregorian).
pub(crate) fn utc(secs: i64) -> Local {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
    Local {
        year,
        month,
        day,
        hour: (rem / 3600) as u32,
        minute: (rem % 3600 / 60) as u32,
        second: (rem % 60) as u32,
        offset: 0,
    }
}

fn now_secs() -> i64 {
    now_epoch() as i64
}

/// `YYYY-MM-DD HH:MM` local (history timestamps, save_memory lines).
pub(crate) fn minute_stamp() -> String {
    let t = local(now_secs());
    format!("{:04}-{:02}-{:02} {:02}:{:02}", t.year, t.month, t.day, t.hour, t.minute)
}

/// `YYYY-MM-DD HH:MM` local for `secs` since the epoch (imported records' timestamps).
pub(crate) fn minute_stamp_of(secs: i64) -> String {
    let t = local(secs);
    format!("{:04}-{:02}-{:02} {:02}:{:02}", t.year, t.month, t.day, t.hour, t.minute)
}

/// `YYYY-MM-DDTHH:MM:SS` local without offset (session list `updated_at`).
pub(crate) fn local_iso_naive(secs: i64) -> String {
    local(secs).ymd_hms('T')
}

/// `YYYY-MM-DDTHH:MM:SS+HH:MM` local with offset (session_updated `updated_at`).
pub(crate) fn local_iso_offset_now() -> String {
    let t = local(now_secs());
    format!("{}{}", t.ymd_hms('T'), t.offset_str(true))
}

/// RFC 3339 UTC with microseconds (`2026-11-30T01:40:18.811534+00:00`).
pub(crate) fn utc_rfc3339_micros() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:06}+00:00", utc(d.as_secs() as i64).ymd_hms('T'), d.subsec_micros())
}

/// Local `YYYY-MM-DD` date (log rotation, snapshot names).
pub(crate) fn local_date(secs: i64) -> String {
    let t = local(secs);
    format!("{:04}-{:02}-{:02}", t.year, t.month, t.day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_civil_dates() {
        let t = utc(0);
        assert_eq!((t.year, t.month, t.day, t.hour), (1970, 1, 1, 0));
        let t = utc(1_796_002_842);
        assert_eq!((t.year, t.month, t.day), (2026, 11, 30));
        let t = utc(951_782_400); // 2000-02-29
        assert_eq!((t.year, t.month, t.day), (2000, 2, 29));
    }

    #[test]
    fn stamps_have_fixed_shapes() {
        assert_eq!(minute_stamp().len(), 16);
        assert_eq!(local_iso_offset_now().len(), 25);
        assert_eq!(local_iso_naive(0).len(), 19);
        assert_eq!(utc_rfc3339_micros().len(), 32);
    }
}
