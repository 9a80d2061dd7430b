//! Every power source and counter reader on fixture trees shaped like the kernel's sysfs
//! and procfs ABI: values, wraparound, detection order, and sources that are missing or
//! give garbage (disabled with a reason, never a panic).
#![allow(clippy::cast_precision_loss)]

use std::path::Path;
use std::time::{Duration, Instant};

use oed_meter::power::{self, Choice, Method, Profile, Source, SourceConfig};
use oed_meter::{Meter, MeterConfig, Roots, procfs};

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn roots(dir: &Path) -> Roots {
    Roots {
        sys: dir.join("sys"),
        proc: dir.join("proc"),
    }
}

fn config(choice: Choice) -> SourceConfig {
    SourceConfig {
        choice,
        hwmon: None,
        command: None,
        command_timeout: Duration::from_millis(500),
        profile: Profile::load("arm-hdd").unwrap(),
    }
}

fn detect(dir: &Path, cfg: &SourceConfig) -> (Source, Vec<String>) {
    let (s, skipped) = power::detect(&roots(dir), cfg);
    (s.expect("a source"), skipped)
}

#[test]
fn hwmon_power_input_in_microwatts() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "sys/class/hwmon/hwmon0/name", "cpu_thermal\n");
    write(dir.path(), "sys/class/hwmon/hwmon0/temp1_input", "45000\n");
    write(dir.path(), "sys/class/hwmon/hwmon1/name", "ina226\n");
    write(
        dir.path(),
        "sys/class/hwmon/hwmon1/power1_input",
        "2500000\n",
    );
    let (mut s, skipped) = detect(dir.path(), &config(Choice::Auto));
    assert_eq!(s.label(), "hwmon:ina226");
    assert_eq!(s.method(), Method::Measured);
    assert!(skipped.iter().any(|r| r.contains("hwmon0")), "{skipped:?}");
    let r = s.sample(Instant::now(), None).unwrap().unwrap();
    assert!((r.watts - 2.5).abs() < 1e-12);
    assert_eq!(r.joules, None);
}

#[test]
fn hwmon_energy_counter_is_preferred_and_differenced() {
    let dir = tempfile::tempdir().unwrap();
    let d = "sys/class/hwmon/hwmon0";
    write(dir.path(), &format!("{d}/name"), "acpi_power_meter");
    write(dir.path(), &format!("{d}/power1_average"), "9000000");
    write(dir.path(), &format!("{d}/energy1_input"), "1000000");
    let (mut s, _) = detect(dir.path(), &config(Choice::Hwmon));
    let t0 = Instant::now();
    assert!(
        s.sample(t0, None).unwrap().is_none(),
        "the first reading is the baseline"
    );
    write(dir.path(), &format!("{d}/energy1_input"), "7000000");
    let r = s
        .sample(t0 + Duration::from_secs(2), None)
        .unwrap()
        .unwrap();
    assert!((r.joules.unwrap() - 6.0).abs() < 1e-12);
    assert!((r.watts - 3.0).abs() < 1e-12);
    // A counter that goes backwards (driver reloaded) fails that reading only.
    write(dir.path(), &format!("{d}/energy1_input"), "5");
    assert!(s.sample(t0 + Duration::from_secs(3), None).is_err());
    write(dir.path(), &format!("{d}/energy1_input"), "1000005");
    let r = s
        .sample(t0 + Duration::from_secs(4), None)
        .unwrap()
        .unwrap();
    assert!((r.joules.unwrap() - 1.0).abs() < 1e-12);
}

#[test]
fn hwmon_garbage_missing_and_filtered_devices_are_skipped_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "sys/class/hwmon/hwmon0/name", "ina219");
    write(
        dir.path(),
        "sys/class/hwmon/hwmon0/power1_input",
        "not-a-number\n",
    );
    write(dir.path(), "sys/class/hwmon/hwmon2/name", "ina226");
    write(dir.path(), "sys/class/hwmon/hwmon2/power1_input", "-5\n");
    write(dir.path(), "sys/class/hwmon/hwmon10/name", "ina3221");
    write(
        dir.path(),
        "sys/class/hwmon/hwmon10/power2_input",
        "1200000\n",
    );
    let (s, skipped) = detect(dir.path(), &config(Choice::Auto));
    assert_eq!(s.label(), "hwmon:ina3221");
    let all = skipped.join("\n");
    assert!(all.contains("not-a-number"), "{all}");
    assert!(all.contains("-5"), "{all}");

    // Restricted to a device that only gives garbage: the model answers, labelled so.
    let mut cfg = config(Choice::Hwmon);
    cfg.hwmon = Some("ina219".into());
    let (s, skipped) = detect(dir.path(), &cfg);
    assert_eq!(s.label(), "model:arm-hdd");
    assert_eq!(s.method(), Method::Modelled);
    assert!(
        skipped[0].starts_with("hwmon: hwmon0 (ina219)"),
        "{skipped:?}"
    );
    cfg.hwmon = Some("nothing".into());
    let (_, skipped) = detect(dir.path(), &cfg);
    assert!(
        skipped[0].contains("no hwmon device is named nothing"),
        "{skipped:?}"
    );

    // No sysfs at all.
    let empty = tempfile::tempdir().unwrap();
    let (s, skipped) = detect(empty.path(), &config(Choice::Auto));
    assert_eq!(s.method(), Method::Modelled);
    assert_eq!(skipped.len(), 2, "{skipped:?}");
}

#[test]
fn a_sensor_that_breaks_later_fails_readings_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "sys/class/hwmon/hwmon0/name", "ina226");
    write(dir.path(), "sys/class/hwmon/hwmon0/power1_input", "1000000");
    let (mut s, _) = detect(dir.path(), &config(Choice::Auto));
    write(
        dir.path(),
        "sys/class/hwmon/hwmon0/power1_input",
        "\u{0}\u{1}garbage",
    );
    assert!(s.sample(Instant::now(), None).is_err());
    std::fs::remove_file(dir.path().join("sys/class/hwmon/hwmon0/power1_input")).unwrap();
    assert!(s.sample(Instant::now(), None).is_err());
}

fn rapl_zone(root: &Path, zone: &str, name: &str, energy: u64, max: u64) {
    let d = format!("sys/class/powercap/{zone}");
    write(root, &format!("{d}/name"), name);
    write(root, &format!("{d}/energy_uj"), &energy.to_string());
    write(root, &format!("{d}/max_energy_range_uj"), &max.to_string());
}

#[test]
fn rapl_sums_packages_and_handles_wraparound() {
    let dir = tempfile::tempdir().unwrap();
    let max = 262_143_328_850;
    rapl_zone(
        dir.path(),
        "intel-rapl:0",
        "package-0",
        max - 1_000_000,
        max,
    );
    rapl_zone(dir.path(), "intel-rapl:1", "package-1", 10_000_000, max);
    // Sub-zones and the MMIO copy are parts of the packages: never added.
    rapl_zone(dir.path(), "intel-rapl:0:0", "core", 5, max);
    rapl_zone(dir.path(), "intel-rapl-mmio:0", "package-0", 5, max);
    let (mut s, _) = detect(dir.path(), &config(Choice::Auto));
    assert_eq!(s.label(), "rapl");
    let t0 = Instant::now();
    assert!(s.sample(t0, None).unwrap().is_none());
    rapl_zone(dir.path(), "intel-rapl:0", "package-0", 2_000_000, max); // wrapped: +3 J
    rapl_zone(dir.path(), "intel-rapl:1", "package-1", 15_000_000, max); // +5 J
    rapl_zone(dir.path(), "intel-rapl:0:0", "core", 999_999_999, max);
    let r = s
        .sample(t0 + Duration::from_secs(4), None)
        .unwrap()
        .unwrap();
    assert!((r.joules.unwrap() - 8.0).abs() < 1e-9, "{r:?}");
    assert!((r.watts - 2.0).abs() < 1e-9);
    // A value above the range is garbage: that reading fails.
    rapl_zone(dir.path(), "intel-rapl:1", "package-1", max + 1, max);
    assert!(s.sample(t0 + Duration::from_secs(5), None).is_err());
}

#[test]
fn rapl_prefers_psys_and_skips_unreadable_zones() {
    let dir = tempfile::tempdir().unwrap();
    rapl_zone(dir.path(), "intel-rapl:0", "package-0", 0, 1000);
    rapl_zone(dir.path(), "intel-rapl:1", "psys", 0, 1_000_000_000);
    let (mut s, _) = detect(dir.path(), &config(Choice::Rapl));
    let t0 = Instant::now();
    s.sample(t0, None).unwrap();
    rapl_zone(dir.path(), "intel-rapl:0", "package-0", 999, 1000);
    rapl_zone(dir.path(), "intel-rapl:1", "psys", 4_000_000, 1_000_000_000);
    let r = s
        .sample(t0 + Duration::from_secs(1), None)
        .unwrap()
        .unwrap();
    assert!((r.joules.unwrap() - 4.0).abs() < 1e-9, "psys alone: {r:?}");

    let bad = tempfile::tempdir().unwrap();
    write(
        bad.path(),
        "sys/class/powercap/intel-rapl:0/energy_uj",
        "12",
    );
    let (s, skipped) = detect(bad.path(), &config(Choice::Rapl));
    assert_eq!(s.method(), Method::Modelled);
    assert!(skipped[0].contains("max_energy_range_uj"), "{skipped:?}");
}

#[test]
fn external_command_prints_watts() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(Choice::Auto);
    cfg.command = Some("echo 'Instantaneous power reading:   212 Watts'".into());
    let (mut s, _) = detect(dir.path(), &cfg);
    assert_eq!(s.label(), "command");
    let r = s.sample(Instant::now(), None).unwrap().unwrap();
    assert!((r.watts - 212.0).abs() < 1e-12);

    for (cmd, why) in [
        ("echo no power here", "no number"),
        ("echo -3", "not a power"),
        ("exit 3", "exited"),
        ("sleep 5; echo 1", "timed out"),
    ] {
        let mut cfg = config(Choice::Command);
        cfg.command = Some(cmd.into());
        cfg.command_timeout = Duration::from_millis(200);
        let started = Instant::now();
        let (s, skipped) = detect(dir.path(), &cfg);
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{cmd} was not stopped"
        );
        assert_eq!(s.method(), Method::Modelled, "{cmd}");
        assert!(skipped[0].contains(why), "{cmd}: {skipped:?}");
    }
}

#[test]
fn detection_order_and_explicit_choices() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "sys/class/hwmon/hwmon0/name", "ina226");
    write(dir.path(), "sys/class/hwmon/hwmon0/power1_input", "1000000");
    rapl_zone(dir.path(), "intel-rapl:0", "package-0", 0, 1000);
    let mut cfg = config(Choice::Auto);
    cfg.command = Some("echo 5".into());
    assert_eq!(detect(dir.path(), &cfg).0.label(), "hwmon:ina226");
    cfg.choice = Choice::Rapl;
    assert_eq!(detect(dir.path(), &cfg).0.label(), "rapl");
    cfg.choice = Choice::Command;
    assert_eq!(detect(dir.path(), &cfg).0.label(), "command");
    cfg.choice = Choice::Model;
    assert_eq!(detect(dir.path(), &cfg).0.label(), "model:arm-hdd");
    cfg.choice = Choice::None;
    assert!(power::detect(&roots(dir.path()), &cfg).0.is_none());
    std::fs::remove_dir_all(dir.path().join("sys/class/hwmon")).unwrap();
    cfg.choice = Choice::Auto;
    assert_eq!(detect(dir.path(), &cfg).0.label(), "rapl");
}

const SELF_STAT: &str = "4242 (oedd (drive) 1) S 1 4242 4242 0 -1 4194560 1500 0 3 0 250 50 0 0 20 -5 9 0 12345 104857600 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

fn proc_tree(root: &Path, busy: u64, idle: u64, disk: [u64; 4], net: [u64; 2]) {
    write(
        root,
        "proc/stat",
        &format!(
            "cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\ncpu1 1 0 0 1 0 0 0 0 0 0\nbtime 1700000000\n"
        ),
    );
    // reads merged sectors ms writes merged sectors ms inflight io_ms weighted
    let [sectors_r, sectors_w, io_ms, ops] = disk;
    write(
        root,
        "proc/diskstats",
        &format!(
            "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0\n 254       0 fixdisk {ops} 0 {sectors_r} 40 {ops} 0 {sectors_w} 60 0 {io_ms} 100 0 0 0 0\n"
        ),
    );
    let [lo, eth] = net;
    write(
        root,
        "proc/net/dev",
        &format!(
            "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: {lo} 10 0 0 0 0 0 0 {lo} 10 0 0 0 0 0 0\n  eth0: {eth} 20 0 0 0 0 0 0 {eth} 30 0 0 0 0 0 0\n"
        ),
    );
    write(root, "proc/self/stat", SELF_STAT);
    write(
        root,
        "proc/self/io",
        "rchar: 10\nwchar: 20\nread_bytes: 4096\nwrite_bytes: 8192\n",
    );
}

#[test]
fn procfs_readers_parse_the_kernel_formats() {
    let dir = tempfile::tempdir().unwrap();
    let r = roots(dir.path());
    proc_tree(dir.path(), 300, 700, [8, 16, 250, 2], [1000, 5000]);
    let cpu = procfs::cpu_times(&r).unwrap();
    assert_eq!((cpu.busy, cpu.total), (300, 1000));
    assert_eq!(procfs::cpu_count(&r).unwrap(), 2);
    let d = procfs::disk_stats(&r, "fixdisk").unwrap();
    assert_eq!(
        (d.read_bytes, d.written_bytes, d.io_ms, d.reads),
        (4096, 8192, 250, 2)
    );
    assert!(procfs::disk_stats(&r, "sdz").is_err());
    let net = procfs::net_stats(&r).unwrap();
    assert_eq!(net[1].interface, "eth0");
    assert_eq!((net[1].rx_bytes, net[1].tx_packets), (5000, 30));
    let p = procfs::process_stats(&r).unwrap();
    let tps = rustix::param::clock_ticks_per_second() as f64;
    assert!((p.cpu_seconds - 300.0 / tps).abs() < 1e-9);
    assert_eq!(p.threads, 9);
    assert_eq!(p.virtual_bytes, 104_857_600);
    assert_eq!(p.resident_bytes, 2048 * rustix::param::page_size() as u64);
    assert!((p.start_time_seconds - (1_700_000_000.0 + 12345.0 / tps)).abs() < 1e-6);
    assert_eq!(p.storage_written_bytes, Some(8192));

    write(dir.path(), "proc/stat", "cpu  1 x 2\n");
    assert!(
        procfs::cpu_times(&r)
            .unwrap_err()
            .to_string()
            .contains("`x` is not a counter")
    );
    write(dir.path(), "proc/self/stat", "1 (no-close S 1");
    assert!(procfs::process_stats(&r).is_err());
    // The real files of this machine parse too.
    let real = Roots::default();
    procfs::cpu_times(&real).unwrap();
    procfs::process_stats(&real).unwrap();
    procfs::net_stats(&real).unwrap();
}

#[test]
fn meter_turns_counters_into_activity_energy_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // The fixture's block device is whatever device really holds the data directory.
    let st = rustix::fs::stat(&data).unwrap();
    let (maj, min) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    write(
        dir.path(),
        &format!("sys/dev/block/{maj}:{min}/uevent"),
        "MAJOR=254\nDEVNAME=fixdisk\n",
    );
    proc_tree(dir.path(), 100, 100, [0, 0, 0, 0], [1000, 0]);
    let registry = prometheus::Registry::new();
    let cfg = MeterConfig {
        source: config(Choice::Auto),
        data_dir: data,
        roots: roots(dir.path()),
    };
    let mut meter = Meter::new(&cfg, &registry).unwrap();
    assert_eq!(meter.device(), Some("fixdisk"));
    assert_eq!(meter.source_label(), "model:arm-hdd");
    assert_eq!(meter.sample(), (None, None));
    std::thread::sleep(Duration::from_millis(50));
    // 60 of 100 ticks busy; 2 MiB read; loopback traffic is left out of the model.
    proc_tree(
        dir.path(),
        160,
        140,
        [4096, 2048, 10, 7],
        [900_000_000, 1_000_000],
    );
    let (activity, watts) = meter.sample();
    let a = activity.unwrap();
    let watts = watts.unwrap();
    assert!((a.cpu_busy - 0.6).abs() < 1e-12, "{a:?}");
    assert!(a.seconds >= 0.05);
    let net = 2.0 * 1_000_000.0 / a.seconds;
    assert!((a.network_bytes_per_second - net).abs() < 1e-6, "{a:?}");
    let expect = Profile::load("arm-hdd").unwrap();
    let model = power::Model::new(expect).watts(&a);
    assert!((watts - model).abs() < 1e-12);
    assert!((meter.energy_joules() - watts * a.seconds).abs() < 1e-9);
    // A reader sees the counter, and the last power times the time since the tick.
    let reader = meter.energy_reader();
    assert_eq!(reader.method(), Some(power::Method::Modelled));
    let started = Instant::now();
    let before = reader.joules_now().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let after = reader.joules_now().unwrap();
    let most = watts * started.elapsed().as_secs_f64();
    assert!(before >= meter.energy_joules());
    let added = after - before;
    assert!(
        added >= watts * 0.1 * 0.999 && added <= most * 1.001,
        "{added} J at {watts} W"
    );

    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    for line in [
        "oed_disk_read_bytes_total{device=\"fixdisk\"} 2097152",
        "oed_disk_written_bytes_total{device=\"fixdisk\"} 1048576",
        "oed_disk_operations_total{device=\"fixdisk\",op=\"read\"} 7",
        "oed_disk_busy_seconds_total{device=\"fixdisk\"} 0.01",
        "oed_disk_read_seconds_total{device=\"fixdisk\"} 0.04",
        "oed_disk_write_seconds_total{device=\"fixdisk\"} 0.06",
        "oed_network_receive_bytes_total{interface=\"eth0\"} 1000000",
        "oed_network_receive_bytes_total{interface=\"lo\"} 900000000",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    assert!(
        text.contains("oed_energy_joules_total{method=\"modelled\",source=\"model:arm-hdd\"}"),
        "{text}"
    );
    assert!(
        text.contains("oed_power_watts{method=\"modelled\",source=\"model:arm-hdd\"}"),
        "{text}"
    );
    // The tick the counter counts up to, as wall-clock time: this test's last sample.
    let stamp: f64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "oed_energy_timestamp_seconds{method=\"modelled\",source=\"model:arm-hdd\"} ",
            )
        })
        .unwrap_or_else(|| panic!("no oed_energy_timestamp_seconds in\n{text}"))
        .parse()
        .unwrap();
    #[allow(clippy::cast_precision_loss, reason = "milliseconds since 1970")]
    let now = oed_meter::wall_ms() as f64 / 1000.0;
    assert!(stamp <= now && stamp > now - 5.0, "{stamp} against {now}");

    // Counters that go backwards (a device re-attached) do not make Prometheus counters
    // go backwards.
    proc_tree(dir.path(), 10, 10, [0, 0, 0, 0], [0, 0]);
    meter.sample();
    let again = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    assert!(again.contains("oed_disk_read_bytes_total{device=\"fixdisk\"} 2097152"));
    // Registering a second meter on the same registry is an error, not a panic.
    assert!(Meter::new(&cfg, &registry).is_err());
}

#[test]
fn calibration_runs_against_a_measured_source_only() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "sys/class/hwmon/hwmon0/name", "ina226");
    write(dir.path(), "sys/class/hwmon/hwmon0/power1_input", "5000000");
    let base = Profile::load("arm-ssd").unwrap();
    let mut cfg = MeterConfig {
        source: config(Choice::Auto),
        data_dir: dir.path().to_owned(),
        // Real /proc for the activity, fixture sysfs for the sensor.
        roots: Roots {
            sys: dir.path().join("sys"),
            proc: "/proc".into(),
        },
    };
    let mut seen = 0;
    let fit = oed_meter::calibrate(&cfg, &base, 5, Duration::from_millis(20), "here", |n| {
        seen = n;
    })
    .unwrap();
    assert_eq!(seen, 5);
    assert_eq!(fit.profile.name, "here");
    // Whatever the host did meanwhile, the fitted model gives the constant 5 W back.
    assert!(fit.rmse_watts < 0.01, "{fit:?}");
    assert_eq!(fit.samples, 5);
    cfg.source.choice = Choice::Model;
    let e =
        oed_meter::calibrate(&cfg, &base, 5, Duration::from_millis(1), "x", |_| {}).unwrap_err();
    assert!(
        e.to_string().contains("needs a measured power source"),
        "{e}"
    );
}
