//! Running the daemon: build the state from a [`Config`], serve a listener the caller
//! bound, and shut down along one path. SIGINT/SIGTERM (handled in `main`) cancel one
//! `CancellationToken`; the HTTP server stops accepting, lets requests in flight finish
//! within the grace period (with the work they left running, [`RequestTasks`]; what is
//! still running after it is cancelled), background tasks stop, and then the store is
//! flushed.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderValue;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics::DriveMetrics;
use oed_cluster::Cluster;
use oed_model::config::Config;
use oed_model::error::{Error, Result};
use oed_model::map::{ClusterMap, RanMap};
use oed_peer::{ConnectionHold, PeerState, ServeAgain, auth::PeerKey};
use oed_store::Store;

/// A drive ready to serve: its store, its view of the cluster, and the state its routes
/// share.
#[derive(Debug)]
pub struct DriveServer {
    /// The local store.
    pub store: Store,
    /// The cluster, as this drive coordinates requests in it.
    pub cluster: Arc<Cluster>,
    peer: Arc<PeerState>,
    s3: Option<s3s::service::S3Service>,
    /// Checks uploads signed chunk by chunk before `s3` sees them.
    streaming: Option<Arc<oed_s3::chunked::Streaming>>,
    grace: Duration,
    header_timeout: Duration,
    max_connections: usize,
    read_buffer: usize,
    /// The drive's metrics registry.
    pub metrics: DriveMetrics,
    meter: oed_meter::Meter,
    meter_period: Duration,
    /// Heal, scrub and refill.
    pub repair: Arc<oed_repair::Repair>,
    /// The listener's TLS, when `tls_cert_file` is set.
    pub tls: Option<Arc<oed_peer::tls::ServerTls>>,
    /// Whether the drives reach each other over TLS (the map's `tls`). When they do not
    /// and the listener has TLS, it also takes the peer API in the clear.
    peer_tls: bool,
    /// The drive's figures for the console (its own and other drives' consoles).
    probe: Arc<oed_console::Probe>,
    /// The web console, when it is on (`console`, and S3 served).
    console: Option<Arc<oed_console::Console>>,
}

impl DriveServer {
    /// Opens the store, reads the cluster map (a drive without one is a cluster of
    /// itself, k = 1, m = 0) and prepares the routes. S3 is served when `s3_secret` is
    /// given.
    ///
    /// # Errors
    /// Those of [`Store::open`]; [`Error::Config`] for a bad cluster map or a drive id
    /// the map does not list.
    pub fn open(config: &Config, secret: &[u8], s3_secret: Option<&str>) -> Result<Self> {
        let map = match &config.cluster_map {
            Some(path) => ClusterMap::load(path)?,
            None => ClusterMap::single(&config.drive_id, &config.listen.to_string()),
        };
        let peer_tls = map.tls;
        if config.drive_id.is_empty() {
            return Err(Error::Config("drive_id must be set".into()));
        }
        let metrics = DriveMetrics::new()?;
        let store = Store::open(config, metrics.traffic.clone())?;
        store.open_accounts(Arc::new(oed_model::account::AccountKeys::derive(secret)))?;
        let map = if config.cluster_map.is_some() && map.index_of(&config.drive_id).is_none() {
            spare_map(&store, &map, config)?
        } else {
            map
        };
        if config.cluster_map.is_some() && !map.is_spare() {
            check_epoch_grows(&store, &map)?;
        }
        let cluster = Arc::new(Cluster::new(
            map,
            config,
            store.clone(),
            &PeerKey::derive(secret),
            metrics.traffic.clone(),
        )?);
        let (s3, streaming) = s3_secret.map(|s| s3_service(&cluster, config, s)).unzip();
        let heal_wake = Arc::new(tokio::sync::Notify::new());
        let peer = peer_state(
            config,
            secret,
            &store,
            &metrics,
            &cluster,
            heal_wake.clone(),
        );
        let repair = oed_repair::Repair::new(
            cluster.clone(),
            oed_repair::RepairConfig::of(config),
            heal_wake,
        );
        metrics
            .registry
            .register(Box::new(oed_meter::process::AtScrape(
                oed_repair::metrics::RepairCollector::new(repair.clone())?,
            )))?;
        metrics.watch(
            store.clone(),
            cluster.clone(),
            peer.clone(),
            &config.drive_id,
        )?;
        let tls = match (&config.tls_cert_file, &config.tls_key_file) {
            (Some(cert), Some(key)) => Some(Arc::new(oed_peer::tls::ServerTls::load(cert, key)?)),
            _ => None,
        };
        let (meter, probe) = metered(config, &metrics, &store, &repair)?;
        let console =
            s3.as_ref()
                .zip(s3_secret)
                .filter(|_| config.console)
                .map(|(service, s3_secret)| {
                    oed_console::Console::new(oed_console::Parts {
                        cluster: cluster.clone(),
                        probe: probe.clone(),
                        auth: oed_s3::KeyAuth::new(
                            cluster.clone(),
                            &config.s3_access_key,
                            s3_secret,
                        ),
                        s3: service.clone(),
                        cluster_secret: secret.to_vec(),
                        session: Duration::from_secs(config.console_session_seconds),
                        secure: tls.is_some(),
                        region: config.region.clone(),
                    })
                });
        Ok(Self {
            store,
            cluster,
            peer,
            s3,
            streaming,
            grace: Duration::from_secs(config.shutdown_grace_seconds),
            header_timeout: Duration::from_secs(config.http_header_timeout_seconds),
            max_connections: config.max_connections,
            read_buffer: config.connection_read_buffer_bytes,
            metrics,
            meter,
            meter_period: Duration::from_millis(config.meter_period_ms),
            repair,
            tls,
            peer_tls,
            probe,
            console,
        })
    }

    /// The listener's routes: the peer API with its admin routes, the console, and S3
    /// for everything else.
    fn routes(&self) -> axum::Router {
        let app = oed_peer::router(
            self.peer.clone(),
            crate::admin_api::routes(self.repair.clone(), self.cluster.clone())
                .merge(oed_console::peer_routes(self.probe.clone())),
        );
        let app = match self.console.clone() {
            Some(console) => app.merge(oed_console::router(console)),
            None => app.merge(oed_console::off()),
        };
        let app = match self.s3.clone() {
            Some(s3) => app.fallback_service(axum::error_handling::HandleError::new(
                s3,
                |e: s3s::HttpError| async move { oed_s3::error::s3s_failure(&e) },
            )),
            None => app.fallback(|| async { Error::NotFound(oed_model::error::Missing::S3Off) }),
        };
        // Uploads signed chunk by chunk are checked before S3 sees them (their chunks
        // hashed together); `/_oed/` paths pass.
        match self.streaming.clone() {
            Some(s) => app.layer(axum::middleware::from_fn_with_state(
                s,
                oed_s3::chunked::take_over,
            )),
            None => app,
        }
    }

    /// Serves `listener` (and `GET /metrics` on `metrics_listener`, when given) until
    /// `shutdown` is cancelled, then drains and flushes. The meter's sampler runs
    /// meanwhile.
    ///
    /// # Errors
    /// [`oed_model::Error::Io`] if the server fails; a flush failure at the end.
    pub async fn serve(
        self,
        listener: TcpListener,
        metrics_listener: Option<TcpListener>,
        shutdown: CancellationToken,
    ) -> Result<()> {
        let app = self.routes();
        let tasks = TaskTracker::new();
        // The sampler sleeps whole periods; dropping `stop` wakes it for shutdown.
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let token = shutdown.child_token();
        tasks.spawn(async move {
            token.cancelled().await;
            drop(stop);
        });
        let (meter, period) = (self.meter, self.meter_period);
        tasks.spawn_blocking(move || sample(meter, period, &stopped));
        if let Some(l) = metrics_listener {
            let app = crate::metrics::router(self.metrics.clone());
            let limits = Limits {
                header_timeout: self.header_timeout,
                max_connections: METRICS_CONNECTIONS,
                read_buffer: oed_model::config::READ_BUFFER_MAX,
                counts: None,
                tls: None,
            };
            tasks.spawn(serve_http(l, app, limits, shutdown.child_token()));
        }
        tasks.spawn(sweep_orphans(self.store.clone(), shutdown.child_token()));
        self.repair.spawn(&tasks, &shutdown);
        let (synced, accounts_ready) = tokio::sync::watch::channel(false);
        let accounts_ready = (accounts_ready, self.cluster.clone());
        tasks.spawn(sync_accounts(
            self.cluster.clone(),
            synced,
            shutdown.child_token(),
        ));
        let app = app
            .layer(axum::middleware::from_fn_with_state(
                accounts_ready,
                after_accounts_sync,
            ))
            .layer(axum::middleware::from_fn(oed_s3::precheck))
            .layer(axum::middleware::from_fn_with_state(
                self.metrics.traffic.clone(),
                crate::metrics::metered,
            ))
            .layer(axum::middleware::from_fn(trace_request))
            .layer(axum::middleware::from_fn_with_state(
                self.repair.requests(),
                count_request,
            ))
            .layer(axum::middleware::from_fn(close_if_continue_unread));
        let requests = self.cluster.tasks.clone();
        if let Some(tls) = self.tls.clone() {
            tasks.spawn(reload_on_hangup(tls, shutdown.child_token()));
        }
        let limits = Limits {
            header_timeout: self.header_timeout,
            max_connections: self.max_connections,
            read_buffer: self.read_buffer,
            counts: Some(self.cluster.clone()),
            tls: self.tls.as_ref().map(|t| ListenerTls {
                acceptor: t.acceptor(),
                clear: (!self.peer_tls)
                    .then(|| app.clone().layer(axum::middleware::from_fn(peer_api_only))),
            }),
        };
        let served = async {
            serve_http(listener, app, limits, shutdown.clone()).await;
            // Connections are closed; what their requests left running finishes too.
            requests.close_and_wait().await;
        };
        let grace = self.grace;
        let drained = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        };
        tokio::select! {
            () = served => {}
            () = drained => {
                tracing::warn!(grace_s = grace.as_secs(), left = requests.len(), "requests still running after the grace period; stopping");
                requests.cancel();
                requests.close_and_wait().await;
            }
        }
        self.peer.slots.close();
        tasks.close();
        tasks.wait().await;
        self.store.flush()?;
        tracing::info!("store flushed; stopped");
        Ok(())
    }
}

/// The state the peer API's routes share.
fn peer_state(
    config: &Config,
    secret: &[u8],
    store: &Store,
    metrics: &DriveMetrics,
    cluster: &Arc<Cluster>,
    heal_wake: Arc<tokio::sync::Notify>,
) -> Arc<PeerState> {
    Arc::new(PeerState {
        drive: Arc::new(store.clone()),
        key: PeerKey::derive(secret),
        clock_skew: config.clock_skew_seconds,
        max_body: config.max_request_body_bytes,
        slots: Arc::new(Semaphore::new(config.max_concurrent_requests)),
        auth_failures: AtomicU64::new(0),
        refusals: oed_peer::RefusalLog::default(),
        traffic: metrics.traffic.clone(),
        heal_wake,
        epoch: cluster.epoch.clone(),
        epoch_mismatches: AtomicU64::new(0),
        raw_connections_kept: AtomicU64::new(0),
        framed_reads: AtomicU64::new(0),
        sendfile: config.shard_sendfile,
        legacy_requests: config.legacy_peer_requests,
        drive_id: config.drive_id.clone(),
        replay: oed_peer::replay::ReplayGuard::new(
            oed_model::record::now_ms(),
            config.clock_skew_seconds,
            config.replay_cache_entries,
        ),
        store: Some(store.clone()),
    })
}

/// The drive's meter, feeding its last hour when the console is on, and the console's
/// view of the drive.
fn metered(
    config: &Config,
    metrics: &DriveMetrics,
    store: &Store,
    repair: &Arc<oed_repair::Repair>,
) -> Result<(oed_meter::Meter, Arc<oed_console::Probe>)> {
    let meter_config = meter_config(config)?;
    let mut meter = oed_meter::Meter::new(&meter_config, &metrics.registry)?;
    store.attach_energy(meter.energy_reader());
    let history = config.console.then(|| {
        let history = Arc::new(oed_meter::history::History::new(Some(
            metrics.traffic.clone(),
        )));
        meter.keep_history(history.clone());
        history
    });
    let probe = oed_console::Probe::new(
        repair.clone(),
        history,
        meter.energy_reader(),
        meter.source_label().to_owned(),
    );
    Ok((meter, probe))
}

/// Refuses a cluster map whose epoch is lower than the one this drive ran before, or a
/// changed map under the same epoch; then records this one.
/// The map of a drive the cluster map does not list: a spare, waiting for a map that
/// lists it (`oedd admin add`), when it never ran one; a drive removed from the map
/// otherwise, which must not start on what it held.
fn spare_map(store: &Store, map: &ClusterMap, config: &Config) -> Result<ClusterMap> {
    if let Some(ran) = store.ran_map()? {
        return Err(Error::Config(format!(
            "drive_id {:?} is not one of the cluster map's drives, and this drive ran epoch {} of it: it was removed from the cluster. To add it again, start it on an empty data_dir and add it (oedd admin add)",
            config.drive_id, ran.epoch
        )));
    }
    tracing::warn!(
        drive = %config.drive_id,
        cluster = %map.cluster_id,
        "the cluster map does not list this drive: it waits as a spare, serving no S3, until a map that lists it arrives (oedd admin add)"
    );
    Ok(ClusterMap::spare(
        map,
        &config.drive_id,
        &config.listen.to_string(),
    ))
}

fn check_epoch_grows(store: &Store, map: &ClusterMap) -> Result<()> {
    let digest = map.digest();
    if let Some(ran) = store.ran_map()? {
        if map.epoch < ran.epoch {
            return Err(Error::Config(format!(
                "cluster map epoch {} is lower than epoch {} this drive ran before: a map's epoch must grow",
                map.epoch, ran.epoch
            )));
        }
        if map.epoch == ran.epoch && digest != ran.digest {
            return Err(Error::Config(format!(
                "the cluster map changed but its epoch is still {}: raise the epoch with every change",
                map.epoch
            )));
        }
    }
    store.record_ran_map(&RanMap::of(map))
}

/// Most connections the metrics listener keeps open.
const METRICS_CONNECTIONS: usize = 64;

/// What one listener allows its clients.
struct Limits {
    /// For a request's headers, and so for idling between requests.
    header_timeout: Duration,
    /// Connections open at once.
    max_connections: usize,
    /// The most each connection buffers of what it reads (hyper's `max_buf_size`).
    read_buffer: usize,
    /// Where open and refused connections are counted, if they are.
    counts: Option<Arc<Cluster>>,
    /// TLS to run on every connection before HTTP, if the listener speaks it.
    tls: Option<ListenerTls>,
}

/// A listener's TLS: the acceptor for connections that open with a TLS handshake and,
/// when the drives talk to each other in the clear, the routes served to connections
/// that open with plain HTTP (the peer API only).
#[derive(Clone)]
struct ListenerTls {
    acceptor: tokio_rustls::TlsAcceptor,
    clear: Option<axum::Router>,
}

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// Refuses S3 on a connection in the clear to a drive that serves TLS: such a drive
/// takes only the peer API (`/_oed/peer/`) that way (not the console either), as S3 refuses requests a bucket policy
/// keeps to TLS (`403 AccessDenied`).
async fn peer_api_only(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if req.uri().path().starts_with("/_oed/peer/") {
        return next.run(req).await;
    }
    oed_s3::error::into_response(oed_s3::error::tls_required())
}

/// The S3 service, and the check of uploads signed chunk by chunk that comes before it,
/// with the bootstrap key's secret `secret`.
fn s3_service(
    cluster: &Arc<Cluster>,
    config: &Config,
    secret: &str,
) -> (s3s::service::S3Service, Arc<oed_s3::chunked::Streaming>) {
    let service = oed_s3::service(
        cluster.clone(),
        &config.s3_access_key,
        secret,
        &config.region,
    );
    let keys = oed_s3::KeyAuth::new(cluster.clone(), &config.s3_access_key, secret);
    (
        service,
        oed_s3::chunked::Streaming::new(keys, &config.region),
    )
}

/// Reads the listener's certificate files again on each SIGHUP, until `shutdown`.
async fn reload_on_hangup(tls: Arc<oed_peer::tls::ServerTls>, shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGHUP; certificates are not reloaded");
            return;
        }
    };
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            got = hangups.recv() => if got.is_none() { return },
        }
        match tls.reload() {
            Ok(()) => tracing::info!("SIGHUP: TLS certificate reloaded; new connections get it"),
            Err(e) => tracing::error!(
                error = %e,
                "SIGHUP: TLS certificate not reloaded; the old one is still served"
            ),
        }
    }
}

/// The answer to a connection past `max_connections`, before it is closed.
const TOO_MANY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 52\r\n\r\nthe drive has as many connections open as it takes\r\n";

/// Serves HTTP/1.1 on `listener` until `shutdown` is cancelled; then stops accepting,
/// asks every connection to close after the request it is serving (idle ones close at
/// once), and returns when they have. Each connection buffers at most
/// `limits.read_buffer` of what it reads (`connection_read_buffer_bytes`, 64 KiB by
/// default, as the drive's own connections to other drives): a coordinator serves dozens
/// of S3 and peer connections, and hyper's default lets each keep a buffer of about
/// 400 KiB. A connection must send each request's headers within `limits.header_timeout`
/// (a client that sends half a header and stops holds nothing for long), and at most
/// `limits.max_connections` are open at once.
async fn serve_http(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.max_buf_size(limits.read_buffer)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (tcp, client) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, from)) => (tcp, from.ip()),
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if let Some(c) = &limits.counts {
                c.stats.connections_refused.fetch_add(1, Ordering::Relaxed);
            }
            tokio::spawn(refuse(tcp));
            continue;
        };
        // Without TCP_NODELAY a response's last small segment waits for the client's
        // delayed ACK, which stalls a single stream of reads for tens of milliseconds.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
        let service = for_client(app.clone(), client);
        let (watcher, counts) = (graceful.watcher(), limits.counts.clone());
        let tls = limits.tls.clone();
        let handshake_timeout = limits.header_timeout;
        let again = Again {
            http: http.clone(),
            timeout: handshake_timeout,
            counts: counts.clone(),
        };
        let stop = shutdown.clone();
        tokio::spawn(async move {
            if let Some(c) = &counts {
                c.stats.connections_open.fetch_add(1, Ordering::Relaxed);
            }
            let slot = Arc::new(slot);
            let served = match tls {
                None => {
                    let io = oed_peer::stall::WriteDeadline::new(tcp, handshake_timeout);
                    let hold = ConnectionHold::new(watcher, slot.clone());
                    serve_upgradable(&again, io, service, hold, stop).await
                }
                Some(tls) => match first_contact(tcp, tls, handshake_timeout).await {
                    Contact::Tls(io) => {
                        let io = TokioIo::new(oed_peer::tls::Coalesce::new(io));
                        watcher
                            .watch(again.http.serve_connection(io, service))
                            .await
                    }
                    Contact::Clear(io, clear) => {
                        let service = for_client(clear, client);
                        let hold = ConnectionHold::new(watcher, slot.clone());
                        serve_upgradable(&again, io, service, hold, stop).await
                    }
                    Contact::Refused(why) => {
                        tracing::debug!(why, "connection to the TLS listener closed");
                        tls_failed(counts.as_ref());
                        Ok(())
                    }
                },
            };
            if let Err(e) = served {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            if let Some(c) = &counts {
                c.stats.connections_open.fetch_sub(1, Ordering::Relaxed);
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// What serving a connection takes beyond its service: to serve a raw upload's
/// connection again once its sender keeps it ([`ServeAgain`]).
#[derive(Clone)]
struct Again {
    http: hyper::server::conn::http1::Builder,
    /// The connection's header timeout (and its writes' deadline).
    timeout: Duration,
    /// Where open connections are counted, if they are.
    counts: Option<Arc<Cluster>>,
}

/// Serves a connection in the clear that may be upgraded to a raw shard upload
/// ([`oed_peer::RAW_UPLOAD`]). hyper's graceful shutdown does not take such a
/// connection, so it is done here: when `stop` fires the connection is asked to close
/// after the request it serves. `hold` goes in each request's extensions, so an upload
/// the connection is upgraded to keeps the server's shutdown waiting, and its
/// connection slot taken, until it ends; so does a [`ServeAgain`], with which the
/// upload hands the connection back when its sender keeps it.
async fn serve_upgradable(
    again: &Again,
    io: oed_peer::stall::WriteDeadline<tokio::net::TcpStream>,
    mut service: ForClient,
    hold: ConnectionHold,
    stop: CancellationToken,
) -> hyper::Result<()> {
    service.hold = Some(hold.clone());
    service.again = Some(ServeAgain::new({
        let (again, app, client, stop) = (
            again.clone(),
            service.app.clone(),
            service.client,
            stop.clone(),
        );
        move |tcp| {
            let service = for_client(app.clone(), client);
            tokio::spawn(serve_kept(
                again.clone(),
                tcp,
                service,
                hold.clone(),
                stop.clone(),
            ));
        }
    }));
    let conn = again
        .http
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        served = conn.as_mut() => served,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    }
}

/// Serves HTTP again on the connection of a raw upload its sender keeps, as the
/// connection it was ([`serve_upgradable`]). Boxed: the connection it serves may be
/// kept again.
fn serve_kept(
    again: Again,
    tcp: tokio::net::TcpStream,
    service: ForClient,
    hold: ConnectionHold,
    stop: CancellationToken,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        if let Some(c) = &again.counts {
            c.stats.connections_open.fetch_add(1, Ordering::Relaxed);
        }
        let io = oed_peer::stall::WriteDeadline::new(tcp, again.timeout);
        if let Err(e) = serve_upgradable(&again, io, service, hold, stop).await {
            tracing::debug!(error = %e, "a kept raw upload connection ended with an error");
        }
        if let Some(c) = &again.counts {
            c.stats.connections_open.fetch_sub(1, Ordering::Relaxed);
        }
    })
}

fn for_client(app: axum::Router, client: std::net::IpAddr) -> ForClient {
    ForClient {
        app,
        client,
        hold: None,
        again: None,
    }
}

/// See [`for_client`].
struct ForClient {
    app: axum::Router,
    client: std::net::IpAddr,
    /// Put in each request's extensions, if any (see [`serve_upgradable`]).
    hold: Option<ConnectionHold>,
    /// The same.
    again: Option<ServeAgain>,
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for ForClient {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = tokio::task::futures::TaskLocalFuture<
        Option<std::net::IpAddr>,
        axum::routing::future::RouteFuture<std::convert::Infallible>,
    >;

    fn call(&self, mut req: http::Request<hyper::body::Incoming>) -> Self::Future {
        if let Some(hold) = &self.hold {
            req.extensions_mut().insert(hold.clone());
        }
        if let Some(again) = &self.again {
            req.extensions_mut().insert(again.clone());
        }
        let mut app = self.app.clone();
        oed_peer::CLIENT.scope(
            Some(self.client),
            tower_service::Service::call(&mut app, req),
        )
    }
}

/// A connection to a TLS listener, once its first bytes have come.
enum Contact {
    /// It opened with a TLS handshake, done.
    Tls(
        Box<tokio_rustls::server::TlsStream<oed_peer::stall::WriteDeadline<tokio::net::TcpStream>>>,
    ),
    /// It opened with plain HTTP, which the listener serves these routes.
    Clear(
        oed_peer::stall::WriteDeadline<tokio::net::TcpStream>,
        axum::Router,
    ),
    /// Neither, or not in time.
    Refused(&'static str),
}

/// Tells a TLS handshake from plain HTTP by the connection's first byte, and does the
/// handshake. The first byte has the time a request's headers have, and so has the
/// handshake: a client that opens a connection and stalls in it holds it no longer.
async fn first_contact(tcp: tokio::net::TcpStream, tls: ListenerTls, limit: Duration) -> Contact {
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(limit, tcp.peek(&mut first)).await;
    let io = oed_peer::stall::WriteDeadline::new(tcp, limit);
    match (peeked, tls.clear) {
        (Ok(Ok(1..)), _) if first[0] == TLS_HANDSHAKE => {
            match tokio::time::timeout(limit, tls.acceptor.accept(io)).await {
                Ok(Ok(io)) => Contact::Tls(Box::new(io)),
                Ok(Err(_)) => Contact::Refused("the TLS handshake failed"),
                Err(_) => Contact::Refused("the TLS handshake timed out"),
            }
        }
        (Ok(Ok(1..)), Some(clear)) => Contact::Clear(io, clear),
        _ => Contact::Refused("it did not start a TLS handshake"),
    }
}

/// Counts a connection whose TLS handshake failed or timed out.
fn tls_failed(counts: Option<&Arc<Cluster>>) {
    if let Some(c) = counts {
        c.stats
            .tls_handshake_failures
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Answers a connection past the limit with [`TOO_MANY`] (at most 1 s spent on it) and
/// closes it.
async fn refuse(mut tcp: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        tcp.write_all(TOO_MANY).await?;
        tcp.shutdown().await
    })
    .await;
}

/// A failed accept: a connection that went away before it was accepted is nothing; any
/// other failure (out of file descriptors, say) is logged, and accepting pauses for a
/// second so that it does not spin while connections close.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accepting a connection failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// The meter's settings from `config`.
///
/// # Errors
/// [`Error::Config`] for a profile that does not load.
pub fn meter_config(config: &Config) -> Result<oed_meter::MeterConfig> {
    Ok(oed_meter::MeterConfig {
        source: oed_meter::power::SourceConfig {
            choice: config.power_source,
            hwmon: config.power_hwmon.clone(),
            command: config.power_command.clone(),
            command_timeout: Duration::from_millis(config.power_command_timeout_ms),
            profile: oed_meter::power::Profile::load(&config.power_profile)?,
        },
        data_dir: config.data_dir.clone(),
        roots: oed_meter::Roots {
            sys: config.meter_sysfs_root.clone(),
            proc: "/proc".into(),
        },
    })
}

/// The meter's sampler: one reading per `period` until `stop` is closed, on a thread of
/// its own. Readings block (procfs reads, an external power command), and queued behind
/// shard I/O on the shared blocking pool they would come seconds late under load.
fn sample(mut meter: oed_meter::Meter, period: Duration, stop: &std::sync::mpsc::Receiver<()>) {
    loop {
        let next = std::time::Instant::now() + period;
        meter.sample();
        let wait = next.saturating_duration_since(std::time::Instant::now());
        if stop.recv_timeout(wait) != Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            return;
        }
    }
}

/// One span per request with its method, path and request id. Every answer names its
/// request (`x-amz-request-id`, 16 hex digits), and an XML error body repeats it in
/// `RequestId`, as S3's do: what a client quotes when it reports a failure, and what
/// finds the request in the drive's log.
async fn trace_request(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use http_body_util::BodyExt as _;
    use tracing::Instrument;
    let id = format!("{:016X}", rand::random::<u64>());
    let span =
        tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), id = %id);
    let resp = next.run(req).instrument(span).await;
    let (mut parts, body) = resp.into_parts();
    if let Ok(v) = HeaderValue::from_str(&id) {
        parts.headers.insert("x-amz-request-id", v);
    }
    let xml_error = parts.status.as_u16() >= 400
        && parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().ends_with(b"xml"))
        && body.size_hint().upper().is_some_and(|n| n <= 64 * 1024);
    if !xml_error {
        return axum::response::Response::from_parts(parts, body);
    }
    let bytes = match body.collect().await {
        Ok(c) => with_request_id(&c.to_bytes(), &id),
        Err(_) => bytes::Bytes::new(),
    };
    parts
        .headers
        .insert(http::header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// An S3 error body with `<RequestId>` added before `</Error>`, unless it has one.
fn with_request_id(body: &[u8], id: &str) -> bytes::Bytes {
    let has = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
    let end = b"</Error>";
    match body.windows(end.len()).rposition(|w| w == end) {
        Some(at) if !has(b"<RequestId>") => {
            let mut out = Vec::with_capacity(body.len() + 48);
            out.extend_from_slice(&body[..at]);
            out.extend_from_slice(format!("<RequestId>{id}</RequestId>").as_bytes());
            out.extend_from_slice(&body[at..]);
            out.into()
        }
        _ => bytes::Bytes::copy_from_slice(body),
    }
}

/// Closes the connection after a response to an `Expect: 100-continue` request whose body
/// was never read, such as a 412 for a conditional PUT. The client was not told to go on,
/// so it does not send the body (botocore sends `Expect` with every `PutObject`); hyper,
/// finding the body unread, drains its declared length from whatever arrives next, and
/// when the client's next request is already there its first bytes are taken as that body:
/// the request then parses with a mangled method and fails SigV4. `Connection: close`
/// makes hyper close instead, and tells the client not to reuse the connection.
async fn close_if_continue_unread(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let continues = req
        .headers()
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if !continues {
        return next.run(req).await;
    }
    let finished = Arc::new(AtomicBool::new(false));
    let req = req.map(|inner| {
        finished.store(inner.is_end_stream(), Ordering::Release);
        axum::body::Body::new(Finished {
            inner,
            finished: finished.clone(),
        })
    });
    let mut resp = next.run(req).await;
    if !finished.load(Ordering::Acquire) {
        resp.headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// Counts a request in `n` from its head until its answer's body is dropped (sent, or
/// the client gone): a streamed GET counts for as long as it streams.
async fn count_request(
    axum::extract::State(n): axum::extract::State<Arc<AtomicUsize>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let guard = Counted::new(n);
    next.run(req).await.map(|inner| {
        axum::body::Body::new(CountedBody {
            inner,
            _guard: guard,
        })
    })
}

/// One request in a count, taken off when dropped.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(n: Arc<AtomicUsize>) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Self(n)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An answer's body that keeps its request counted.
struct CountedBody {
    inner: axum::body::Body,
    _guard: Counted,
}

impl HttpBody for CountedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that records when it has been read to its end.
struct Finished {
    inner: axum::body::Body,
    finished: Arc<AtomicBool>,
}

impl HttpBody for Finished {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.finished.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Sweeps orphan shard files once, off the hot path: they are harmless but take space.
async fn sweep_orphans(store: Store, stop: CancellationToken) {
    let swept = tokio::select! {
        r = tokio::task::spawn_blocking(move || store.sweep_orphans()) => r,
        () = stop.cancelled() => return,
    };
    match swept {
        Ok(Ok(n)) if n > 0 => tracing::info!(removed = n, "orphan shard files removed"),
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "orphan sweep failed"),
        Err(e) => tracing::warn!(error = %e, "orphan sweep panicked"),
    }
}

/// Copies the bucket records it lacks from the other drives ([`Cluster::copy_buckets`]:
/// a drive new to the cluster, or down when buckets were made), then compares the account
/// table with the other drives' at start and every
/// [`oed_cluster::accounts::SYNC_PERIOD`] until `stop` (`oed_cluster::accounts`); `synced`
/// turns true once the first comparison is over (every other drive answered or failed).
async fn sync_accounts(
    cluster: Arc<Cluster>,
    synced: tokio::sync::watch::Sender<bool>,
    stop: CancellationToken,
) {
    // A spare has no cluster to copy from until a map lists it.
    while cluster.map().is_spare() {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            () = stop.cancelled() => return,
        }
    }
    tokio::select! {
        _ = cluster.copy_buckets() => {}
        () = stop.cancelled() => return,
    }
    loop {
        tokio::select! {
            _ = cluster.sync_accounts() => {}
            () = stop.cancelled() => return,
        }
        synced.send_replace(true);
        tokio::select! {
            () = tokio::time::sleep(oed_cluster::accounts::SYNC_PERIOD) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Holds S3 requests until the drive's first comparison of account tables is over, so
/// that a drive that was down when a key was revoked refuses it from its first S3 request
/// (the peer API is served meanwhile: the other drives compare with it). The comparison
/// is bounded by the peer timeout per drive; a request waits at most a minute.
/// A spare (a drive the map does not list yet) refuses S3 requests.
async fn after_accounts_sync(
    axum::extract::State((mut ready, cluster)): axum::extract::State<(
        tokio::sync::watch::Receiver<bool>,
        Arc<Cluster>,
    )>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    // The console's logins, sessions and S3 requests check keys as S3 does: they wait
    // for the account table too.
    let path = req.uri().path();
    let s3 = match path.strip_prefix("/_oed/") {
        None => true,
        Some(rest) => rest.strip_prefix("console/api/").is_some_and(|api| {
            ["login", "session", "s3"]
                .iter()
                .any(|p| api.starts_with(p))
        }),
    };
    if s3 && cluster.map().is_spare() {
        return oed_s3::error::into_response(s3s::S3Error::with_message(
            s3s::S3ErrorCode::ServiceUnavailable,
            "This drive is a spare: the cluster map does not list it yet (oedd admin add)",
        ));
    }
    if !*ready.borrow() && s3 {
        let _ = tokio::time::timeout(Duration::from_mins(1), ready.wait_for(|r| *r)).await;
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_gets_the_request_id_once() {
        let body = b"<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code></Error>";
        let got = with_request_id(body, "00AB");
        assert_eq!(
            &got[..],
            &b"<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><RequestId>00AB</RequestId></Error>"[..]
        );
        assert_eq!(with_request_id(&got, "FFFF"), got);
        assert_eq!(&with_request_id(b"not xml", "1")[..], b"not xml");
    }

    /// A drive takes a map of the epoch it ran, unchanged, or of a higher one; it refuses
    /// a lower epoch, and a changed map under the same epoch.
    #[test]
    fn a_cluster_map_epoch_must_grow() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().to_owned(),
            ..Config::default()
        };
        let traffic = oed_meter::traffic::Traffic::new(&prometheus::Registry::new()).unwrap();
        let store = Store::open(&config, traffic).unwrap();
        let mut map = ClusterMap::single("drive-1", "127.0.0.1:9400");
        map.epoch = 2;
        check_epoch_grows(&store, &map).unwrap();
        check_epoch_grows(&store, &map).unwrap();
        let mut changed = map.clone();
        changed.drives[0].address = "127.0.0.1:9401".into();
        let e = check_epoch_grows(&store, &changed).unwrap_err();
        assert!(e.to_string().contains("raise the epoch"), "{e}");
        let mut lower = map.clone();
        lower.epoch = 1;
        let e = check_epoch_grows(&store, &lower).unwrap_err();
        assert!(e.to_string().contains("must grow"), "{e}");
        changed.epoch = 3;
        check_epoch_grows(&store, &changed).unwrap();
        assert!(check_epoch_grows(&store, &map).is_err(), "back to epoch 2");
    }
}
