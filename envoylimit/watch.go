package envoylimit

import (
	"context"
	"hash/fnv"
	"os"
	"time"
)

// Reload loads the configuration from paths (as [LoadConfig] does) and
// puts it in force ([Service.SetConfig]). On an error, a bad file say,
// the configuration in force stays, and the error names the file and line.
func (s *Service) Reload(paths ...string) error {
	cfg, err := LoadConfig(paths...)
	if err != nil {
		return err
	}
	return s.SetConfig(cfg)
}

// Watch reloads the configuration from paths whenever their contents
// change, looking every interval on the Service's clock ([WithClock]),
// until ctx is done. After each reload it calls onReload, when not nil,
// with nil or the reload's error (the old configuration then stays in
// force; the next change is tried again). A change is seen by content, so
// a rewrite in place, a rename over the file, an added or a removed file
// of a directory all count, and touching a file does not.
func (s *Service) Watch(ctx context.Context, interval time.Duration, onReload func(error), paths ...string) {
	if interval <= 0 {
		interval = time.Second
	}
	after := time.After
	if c := s.opts.clock; c != nil {
		after = c.After
	}
	last := fingerprint(paths)
	for {
		select {
		case <-ctx.Done():
			return
		case <-after(interval):
		}
		fp := fingerprint(paths)
		if fp == last {
			continue
		}
		last = fp // a failed reload waits for the next change
		err := s.Reload(paths...)
		if onReload != nil {
			onReload(err)
		}
	}
}

// fingerprint hashes the names and contents of the configuration files
// under paths, or the error that lists them.
func fingerprint(paths []string) uint64 {
	h := fnv.New64a()
	files, err := configFiles(paths)
	if err != nil {
		h.Write([]byte(err.Error()))
	}
	for _, f := range files {
		h.Write([]byte(f))
		h.Write([]byte{0})
		if data, err := os.ReadFile(f); err == nil {
			h.Write(data)
		}
		h.Write([]byte{0})
	}
	return h.Sum64()
}
