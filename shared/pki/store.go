// Package pki keeps the node's certificates: keys, certificate signing requests through the
// certificates.k8s.io API, the kubelet's certificate files (a timestamped PEM of
// certificate and key, and a "-current.pem" link to it), and the kubeconfig that points at
// them. unitlet-config uses it to bootstrap and unitlet-certs to rotate.
package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/unitlet/unitlet/shared/checkpoint"
)

// The file prefixes of the kubelet's certificates in its certificate directory.
const (
	ClientPrefix = "kubelet-client"
	ServerPrefix = "kubelet-server"
)

// ErrNoCertificate means a store has no current certificate yet.
var ErrNoCertificate = errors.New("no current certificate")

// Store is one kind of certificate in a directory, as the kubelet keeps it:
// <prefix>-<YYYY-MM-DD-HH-MM-SS>.pem holds the certificate chain then the key (0600), and
// <prefix>-current.pem is a symbolic link to the one in use.
type Store struct {
	Dir    string
	Prefix string
}

// CurrentPath is the link to the certificate in use; a kubeconfig points at it.
func (s Store) CurrentPath() string { return filepath.Join(s.Dir, s.Prefix+"-current.pem") }

// Current loads the certificate in use, with its Leaf. ErrNoCertificate when there is none.
func (s Store) Current() (*tls.Certificate, error) {
	path := s.CurrentPath()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoCertificate, path)
	}
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(b, b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &cert, nil
}

// Update checks that certPEM and keyPEM are a pair, writes them to a new timestamped file
// (0600, fsynced) and swings the current link to it atomically: a crash at any moment
// leaves the old or the new certificate current, never none. The directory is made 0700
// when missing; temporary files a writer killed mid-write left in it are removed. It returns the new file's path.
func (s Store) Update(certPEM, keyPEM []byte, now time.Time) (string, error) {
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return "", fmt.Errorf("certificate and key do not match: %w", err)
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return "", err
	}
	checkpoint.RemoveStaleTemps(s.Dir) // left by a writer killed mid-write
	name := filepath.Join(s.Dir, s.Prefix+"-"+now.UTC().Format("2006-01-02-15-04-05")+".pem")
	for i := 1; ; i++ { // two updates within a second keep both files
		if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			break
		}
		name = filepath.Join(s.Dir, fmt.Sprintf("%s-%s-%d.pem", s.Prefix, now.UTC().Format("2006-01-02-15-04-05"), i))
	}
	var b bytes.Buffer
	b.Write(bytes.TrimSpace(certPEM))
	b.WriteString("\n")
	b.Write(bytes.TrimSpace(keyPEM))
	b.WriteString("\n")
	if err := checkpoint.WriteFileAtomic(name, b.Bytes(), 0o600); err != nil {
		return "", err
	}
	link := s.CurrentPath()
	tmp := link + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(name), tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, link); err != nil {
		return "", err
	}
	return name, syncDir(s.Dir)
}

// Prune removes the store's timestamped files but the newest keep and the current one.
func (s Store) Prune(keep int) error {
	current, _ := os.Readlink(s.CurrentPath())
	matches, err := filepath.Glob(filepath.Join(s.Dir, s.Prefix+"-*.pem"))
	if err != nil {
		return err
	}
	var files []string
	for _, m := range matches {
		if base := filepath.Base(m); base != filepath.Base(s.CurrentPath()) && base != filepath.Base(current) &&
			!strings.HasSuffix(base, ".tmp") {
			files = append(files, m)
		}
	}
	// By time: the timestamp, then the counter of updates within one second.
	sort.Slice(files, func(i, j int) bool {
		return strings.TrimSuffix(files[i], ".pem") < strings.TrimSuffix(files[j], ".pem")
	})
	var errs []error
	for len(files) > keep {
		errs = append(errs, os.Remove(files[0]))
		files = files[1:]
	}
	return errors.Join(errs...)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ParseCertificates decodes the certificates of a PEM bundle, the leaf first.
func ParseCertificates(certPEM []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := certPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no certificate in PEM data")
	}
	return out, nil
}

func tlsPair(certPEM, keyPEM []byte) (tls.Certificate, error) {
	return tls.X509KeyPair(certPEM, keyPEM)
}
