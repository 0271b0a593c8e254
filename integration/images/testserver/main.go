// Command testserver is the probe and lifecycle test image of unitlet's test stack.
//
//	testserver serve [-http=:8080] [-tcp=:9090]   HTTP with a switchable /healthz, and a TCP port
//	testserver exit CODE                          exit with CODE
//	testserver sleep DURATION                     sleep, then exit 0
//
// While serving: GET /healthz answers 200 or 500; POST /healthz/fail and /healthz/ok switch
// it; GET /exit?code=N exits with N; GET /redirect?to=URL redirects (302) to URL; GET /env
// prints the environment.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testserver serve|exit CODE|sleep DURATION")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "exit":
		code, err := strconv.Atoi(arg(2))
		if err != nil {
			fmt.Fprintln(os.Stderr, "exit: want a number")
			os.Exit(2)
		}
		fmt.Printf("exiting with %d\n", code)
		os.Exit(code)
	case "sleep":
		d, err := time.ParseDuration(arg(2))
		if err != nil {
			fmt.Fprintln(os.Stderr, "sleep: want a duration such as 30s")
			os.Exit(2)
		}
		time.Sleep(d)
	case "serve":
		serve(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func arg(i int) string {
	if len(os.Args) > i {
		return os.Args[i]
	}
	return ""
}

func serve(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	httpAddr := fs.String("http", ":8080", "HTTP address")
	tcpAddr := fs.String("tcp", ":9090", "TCP address (accepts and closes)")
	_ = fs.Parse(args)

	var failing atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			http.Error(w, "failing", http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/healthz/fail", func(w http.ResponseWriter, r *http.Request) { failing.Store(true) })
	mux.HandleFunc("/healthz/ok", func(w http.ResponseWriter, r *http.Request) { failing.Store(false) })
	mux.HandleFunc("/exit", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		go func() { time.Sleep(50 * time.Millisecond); os.Exit(code) }()
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, strings.Join(os.Environ(), "\n"))
	})
	l, err := net.Listen("tcp", *tcpAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		s := <-sigs
		fmt.Printf("got %s, exiting\n", s)
		os.Exit(0)
	}()
	fmt.Printf("serving http on %s, tcp on %s\n", *httpAddr, *tcpAddr)
	srv := &http.Server{Addr: *httpAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
