// Command etcd is a single-member etcd for the node test bed, built from etcd's own embed
// package at the version k8s.io/kubernetes pins, so that no prebuilt binary is downloaded.
// It listens on loopback only and stops on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "where etcd keeps its data (required)")
	client := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL, loopback only")
	peer := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL, loopback only")
	flag.Parse()
	if err := run(*dataDir, *client, *peer); err != nil {
		log.Fatalf("etcd: %v", err)
	}
}

func run(dataDir, client, peer string) error {
	if dataDir == "" {
		return fmt.Errorf("--data-dir is required")
	}
	cu, err := url.Parse(client)
	if err != nil {
		return fmt.Errorf("--listen-client-url: %w", err)
	}
	pu, err := url.Parse(peer)
	if err != nil {
		return fmt.Errorf("--listen-peer-url: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "crishim-node"
	cfg.Dir = dataDir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	// The test bed's data is thrown away with it; fsync would only slow every write.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		return fmt.Errorf("not ready within a minute")
	}
	fmt.Fprintln(os.Stderr, "etcd ready on", client)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		fmt.Fprintln(os.Stderr, "etcd stopping on", s)
		return nil
	case err := <-e.Err():
		return err
	}
}
