//! `%START_TIME%` rendering: Envoy's default (`2026-12-02T16:13:12.464Z`) and
//! strftime-style custom formats in UTC, with Envoy's `%f` / `%1f`..`%9f`
//! fractional seconds and `%s` epoch seconds. Written here (a small civil-date
//! conversion) rather than pulling in a date crate for one command.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// A broken-down UTC time.
struct Civil {
    secs: i64,
    nanos: u32,
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    /// 0 = Sunday.
    weekday: u32,
    /// 1-based day of the year.
    yday: u32,
}

fn civil(t: SystemTime) -> Civil {
    let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(_) => (0, 0),
    };
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400) as u32;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const CUMULATIVE: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = CUMULATIVE[(month - 1) as usize] + day + u32::from(leap && month > 2);
    Civil {
        secs,
        nanos,
        year,
        month,
        day,
        hour: rem / 3600,
        minute: rem / 60 % 60,
        second: rem % 60,
        weekday: (days + 4).rem_euclid(7) as u32,
        yday,
    }
}

/// Envoy's default `%START_TIME%`: RFC 3339 in UTC with milliseconds.
pub fn default_format(t: SystemTime, out: &mut String) {
    let c = civil(t);
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        c.year,
        c.month,
        c.day,
        c.hour,
        c.minute,
        c.second,
        c.nanos / 1_000_000
    );
}

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Renders `t` (UTC) with a strftime-style `format`. Unknown specifiers are copied
/// as written.
pub fn strftime(t: SystemTime, format: &str, out: &mut String) {
    let c = civil(t);
    let mut chars = format.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        let Some(spec) = chars.next() else {
            out.push('%');
            break;
        };
        let month_name = MONTHS[(c.month - 1) as usize % 12];
        let day_name = DAYS[c.weekday as usize % 7];
        let _ = match spec {
            '%' => write!(out, "%"),
            'Y' => write!(out, "{}", c.year),
            'C' => write!(out, "{:02}", c.year / 100),
            'y' => write!(out, "{:02}", c.year % 100),
            'm' => write!(out, "{:02}", c.month),
            'd' => write!(out, "{:02}", c.day),
            'e' => write!(out, "{:2}", c.day),
            'H' => write!(out, "{:02}", c.hour),
            'I' => write!(out, "{:02}", (c.hour + 11) % 12 + 1),
            'p' => write!(out, "{}", if c.hour < 12 { "AM" } else { "PM" }),
            'M' => write!(out, "{:02}", c.minute),
            'S' => write!(out, "{:02}", c.second),
            'j' => write!(out, "{:03}", c.yday),
            'a' => write!(out, "{}", &day_name[..3]),
            'A' => write!(out, "{day_name}"),
            'b' | 'h' => write!(out, "{}", &month_name[..3]),
            'B' => write!(out, "{month_name}"),
            'u' => write!(out, "{}", if c.weekday == 0 { 7 } else { c.weekday }),
            'w' => write!(out, "{}", c.weekday),
            'z' => write!(out, "+0000"),
            'Z' => write!(out, "UTC"),
            's' => write!(out, "{}", c.secs),
            'n' => writeln!(out),
            't' => write!(out, "\t"),
            'T' => write!(out, "{:02}:{:02}:{:02}", c.hour, c.minute, c.second),
            'R' => write!(out, "{:02}:{:02}", c.hour, c.minute),
            'F' => write!(out, "{}-{:02}-{:02}", c.year, c.month, c.day),
            'D' => write!(out, "{:02}/{:02}/{:02}", c.month, c.day, c.year % 100),
            // Envoy: `%f` is nanoseconds (9 digits).
            'f' => write!(out, "{:09}", c.nanos),
            d @ '1'..='9' if chars.peek() == Some(&'f') => {
                chars.next();
                let digits = d as usize - '0' as usize;
                let s = format!("{:09}", c.nanos);
                write!(out, "{}", &s[..digits])
            }
            other => write!(out, "%{other}"),
        };
    }
}

/// Renders one of spdlog's time flags (Envoy's `--log-format` and
/// `application_log_config`) for `t` in UTC: `%e` milliseconds, `%f`
/// microseconds, `%F` nanoseconds, `%E` epoch seconds and the strftime-like
/// rest. `false` for a flag that is not a time flag.
pub fn spdlog_flag(t: SystemTime, flag: char, out: &mut String) -> bool {
    let c = civil(t);
    let month_name = MONTHS[(c.month - 1) as usize % 12];
    let day_name = DAYS[c.weekday as usize % 7];
    let hour12 = (c.hour + 11) % 12 + 1;
    let am_pm = if c.hour < 12 { "AM" } else { "PM" };
    let _ = match flag {
        'a' => write!(out, "{}", &day_name[..3]),
        'A' => write!(out, "{day_name}"),
        'b' | 'h' => write!(out, "{}", &month_name[..3]),
        'B' => write!(out, "{month_name}"),
        'c' => write!(
            out,
            "{} {} {:2} {:02}:{:02}:{:02} {}",
            &day_name[..3],
            &month_name[..3],
            c.day,
            c.hour,
            c.minute,
            c.second,
            c.year
        ),
        'C' => write!(out, "{:02}", c.year % 100),
        'Y' => write!(out, "{}", c.year),
        'D' | 'x' => write!(out, "{:02}/{:02}/{:02}", c.month, c.day, c.year % 100),
        'm' => write!(out, "{:02}", c.month),
        'd' => write!(out, "{:02}", c.day),
        'H' => write!(out, "{:02}", c.hour),
        'I' => write!(out, "{hour12:02}"),
        'M' => write!(out, "{:02}", c.minute),
        'S' => write!(out, "{:02}", c.second),
        'e' => write!(out, "{:03}", c.nanos / 1_000_000),
        'f' => write!(out, "{:06}", c.nanos / 1_000),
        'F' => write!(out, "{:09}", c.nanos),
        'p' => write!(out, "{am_pm}"),
        'r' => write!(out, "{hour12:02}:{:02}:{:02} {am_pm}", c.minute, c.second),
        'R' => write!(out, "{:02}:{:02}", c.hour, c.minute),
        'T' | 'X' => write!(out, "{:02}:{:02}:{:02}", c.hour, c.minute, c.second),
        'z' => write!(out, "+00:00"),
        'E' => write!(out, "{}", c.secs),
        _ => return false,
    };
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn default_is_rfc3339_millis() {
        let mut s = String::new();
        // 2026-12-02T16:13:12.464Z
        default_format(at(1_796_227_992, 464_900_000), &mut s);
        assert_eq!(s, "2026-12-02T16:13:12.464Z");
        s.clear();
        default_format(at(951_782_400, 0), &mut s);
        assert_eq!(s, "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn strftime_specifiers() {
        let t = at(1_796_227_992, 464_912_345);
        let mut s = String::new();
        strftime(t, "%Y/%m/%dT%H:%M:%S%z %s.%3f %f %6f %a %b %j %%", &mut s);
        assert_eq!(
            s,
            "2026/12/02T16:13:12+0000 1796227992.464 464912345 464912 Wed Dec 336 %"
        );
    }

    #[test]
    fn spdlog_time_flags() {
        let t = at(1_796_227_992, 464_912_345);
        let mut s = String::new();
        for f in "YmdTefFEzcDrCI".chars() {
            assert!(spdlog_flag(t, f, &mut s));
            s.push('|');
        }
        assert_eq!(
            s,
            "2026|12|02|16:13:12|464|464912|464912345|1796227992|+00:00|\
             Wed Dec  2 16:13:12 2026|12/02/26|04:13:12 PM|26|04|"
        );
        assert!(!spdlog_flag(t, 'v', &mut s));
    }
}
