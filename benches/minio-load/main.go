// minio-load: an S3 load made with minio-go v7, the client library behind mc, warp and
// many applications, with its client made as mc and warp make theirs (TrailingHeaders on):
// over http:// it streams every upload as aws-chunked chunks of 64 KiB, each signed
// (minio-go 7.4 adds a signed CRC32C trailer to multipart parts, not to a single PUT);
// over https:// the payload is not signed. What it sends is what a server of minio-go's users sees, so the
// benchmarks measure a PUT or a GET as those users pay for it.
//
//	minio-load -endpoint http://127.0.0.1:9000 -bucket bench -phase put -size 4MiB -count 256 -clients 16
//
// Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Each phase prints one
// line, as benches/release-bins.sh's bench_phase prints oedd bench's:
//
//	PUT: X MiB/s, Y objects/s, E errors; latency ms p50 A p90 B p99 C max D
//
// -phase get reads the objects a put phase with the same -prefix left and compares every
// byte; -phase delete removes them. -show-signing sends one upload with minio-go's trace on
// and prints the headers that say how it was signed. Every loop is bounded by -count and
// by -max-seconds.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// window is the extra random bytes past one object: objects start at different offsets
// of one buffer, so no two are alike and none is copied to be sent.
const window = 16 << 20

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"B", 1}}
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			n, err := strconv.ParseFloat(strings.TrimSuffix(s, u.suffix), 64)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("size %q is not like 4MiB", s)
			}
			return int64(n * float64(u.mult)), nil
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q is not like 4MiB", s)
	}
	return n, nil
}

// pool is random-looking bytes (xorshift64), made once.
func pool(n int64) []byte {
	b := make([]byte, n)
	x := uint64(0x9E3779B97F4A7C15)
	for i := int64(0); i+8 <= n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		for j := 0; j < 8; j++ {
			b[i+int64(j)] = byte(x >> (8 * j))
		}
	}
	return b
}

func offset(i int64) int64 { return (i * 65537) % window }

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p / 100 * float64(len(sorted)))
	if float64(rank) < p/100*float64(len(sorted)) {
		rank++
	}
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

func main() {
	endpoint := flag.String("endpoint", "", "S3 endpoint, http://host:port or https://host:port")
	bucket := flag.String("bucket", "bench", "bucket (made when missing)")
	phase := flag.String("phase", "put", "put, get or delete")
	sizeFlag := flag.String("size", "4MiB", "object size")
	count := flag.Int64("count", 256, "objects")
	clients := flag.Int("clients", 16, "requests in flight")
	prefix := flag.String("prefix", "minio-load", "the objects' key prefix")
	region := flag.String("region", "us-east-1", "region")
	maxSeconds := flag.Float64("max-seconds", 600, "a phase stops sending after this long")
	showSigning := flag.Bool("show-signing", false, "send one upload with the trace on and print how it was signed")
	trailing := flag.Bool("trailing-headers", true, "create the client with TrailingHeaders, as mc and warp do (a CRC32C trailer on uploads)")
	flag.Parse()

	u, err := url.Parse(*endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		fmt.Fprintf(os.Stderr, "minio-load: -endpoint %q is not http://host:port or https://host:port\n", *endpoint)
		os.Exit(2)
	}
	size, err := parseSize(*sizeFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "minio-load:", err)
		os.Exit(2)
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:           credentials.NewStaticV4(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), ""),
		Secure:          u.Scheme == "https",
		Region:          *region,
		TrailingHeaders: *trailing,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "minio-load:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	if *phase == "put" || *showSigning {
		if err := client.MakeBucket(ctx, *bucket, minio.MakeBucketOptions{Region: *region}); err != nil {
			if exists, e := client.BucketExists(ctx, *bucket); e != nil || !exists {
				fmt.Fprintln(os.Stderr, "minio-load: making the bucket:", err)
				os.Exit(1)
			}
		}
	}
	data := pool(size + window)
	if *showSigning {
		var trace bytes.Buffer
		client.TraceOn(&trace)
		_, err := client.PutObject(ctx, *bucket, *prefix+"/signing", bytes.NewReader(data[:size]), size, minio.PutObjectOptions{})
		client.TraceOff()
		if err != nil {
			fmt.Fprintln(os.Stderr, "minio-load: the traced upload:", err)
			os.Exit(1)
		}
		for _, line := range strings.Split(trace.String(), "\n") {
			l := strings.ToLower(line)
			for _, h := range []string{"x-amz-content-sha256:", "x-amz-trailer:", "content-encoding:", "x-amz-decoded-content-length:"} {
				if strings.HasPrefix(strings.TrimSpace(l), h) {
					fmt.Println(strings.TrimSpace(line))
				}
			}
			if strings.HasPrefix(line, "PUT ") || strings.HasPrefix(line, "HTTP/") {
				fmt.Println(strings.TrimSpace(line))
			}
		}
		_ = client.RemoveObject(ctx, *bucket, *prefix+"/signing", minio.RemoveObjectOptions{})
		return
	}

	var next, errs, done atomic.Int64
	var mu sync.Mutex
	var lat []float64
	var firstErrors []string
	deadline := time.Now().Add(time.Duration(*maxSeconds * float64(time.Second)))
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < *clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, size)
			var mine []float64
			for time.Now().Before(deadline) {
				i := next.Add(1) - 1
				if i >= *count {
					break
				}
				key := fmt.Sprintf("%s/%08d", *prefix, i)
				body := data[offset(i) : offset(i)+size]
				t := time.Now()
				var err error
				switch *phase {
				case "put":
					_, err = client.PutObject(ctx, *bucket, key, bytes.NewReader(body), size, minio.PutObjectOptions{})
				case "get":
					var obj *minio.Object
					obj, err = client.GetObject(ctx, *bucket, key, minio.GetObjectOptions{})
					if err == nil {
						var n int
						n, err = io.ReadFull(obj, buf)
						obj.Close()
						if err == nil && (int64(n) != size || !bytes.Equal(buf, body)) {
							err = fmt.Errorf("the bytes read differ from those written")
						}
					}
				case "delete":
					err = client.RemoveObject(ctx, *bucket, key, minio.RemoveObjectOptions{})
				default:
					fmt.Fprintf(os.Stderr, "minio-load: -phase %q is not put, get or delete\n", *phase)
					os.Exit(2)
				}
				mine = append(mine, float64(time.Since(t).Microseconds())/1000)
				if err != nil {
					errs.Add(1)
					mu.Lock()
					if len(firstErrors) < 5 {
						firstErrors = append(firstErrors, key+": "+err.Error())
					}
					mu.Unlock()
				} else {
					done.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	sort.Float64s(lat)
	max := 0.0
	if len(lat) > 0 {
		max = lat[len(lat)-1]
	}
	name := map[string]string{"put": "PUT", "get": "GET", "delete": "DELETE"}[*phase]
	mib := float64(done.Load()*size) / (1 << 20)
	fmt.Printf("%s: %.1f MiB/s, %.1f objects/s, %d errors; latency ms p50 %.1f p90 %.1f p99 %.1f max %.1f\n",
		name, mib/secs, float64(done.Load())/secs, errs.Load(),
		percentile(lat, 50), percentile(lat, 90), percentile(lat, 99), max)
	for _, e := range firstErrors {
		fmt.Fprintln(os.Stderr, "minio-load: error:", e)
	}
	if errs.Load() > 0 {
		os.Exit(1)
	}
}
