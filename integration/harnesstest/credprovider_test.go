package harnesstest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// pluginCacheDuration is single-node.yaml's node-1 imageCredentialProvider.cacheDuration:
// the config's defaultCacheDuration and the plugin's answers' cacheDuration.
const pluginCacheDuration = 30 * time.Second

// pluginRuns are the images node-1's credential provider plugin has been run for.
func pluginRuns(t *testing.T) []string {
	t.Helper()
	runs, err := stack.CredentialProviderRuns(podsyncNode)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// pulledBy waits for pod's Pulled event naming image.
func pulledBy(t *testing.T, pod, image string) {
	t.Helper()
	want := `Pulled: Successfully pulled image "` + image + `"`
	stack.WaitFor(t, 30*time.Second, pod+"'s Pulled event", func(ctx context.Context) (bool, string) {
		evs := podEvents(ctx, t, pod)
		return strings.Contains(evs, want), evs
	})
}

// TestCredentialProviderPluginGivesTheRegistryAccount runs pods of the stack registry's
// image under the credential provider plugin's matchImages with no imagePullSecrets: the
// plugin (integration/credentialplugin, run by podsync through the exec API) gives the
// registry's htpasswd account and the pull succeeds. Its answer is cached by registry for
// its cacheDuration: a second pull within it runs no plugin, one after it does. Images
// outside matchImages (the same registry's other path, the local busybox) never run it.
func TestCredentialProviderPluginGivesTheRegistryAccount(t *testing.T) {
	t.Parallel()
	reg, err := stack.Registry()
	if err != nil {
		t.Fatal(err)
	}
	repo := reg.PluginBusybox[:strings.LastIndex(reg.PluginBusybox, ":")]
	forgetImage(t, reg.PluginBusybox)
	before := pluginRuns(t)
	wantRuns := func(what string, n int) {
		t.Helper()
		runs := pluginRuns(t)
		if len(runs) != len(before)+n {
			t.Fatalf("%s: the plugin ran %d times (for %q), want %d", what, len(runs)-len(before), runs[len(before):], n)
		}
		for _, img := range runs[len(before):] {
			if img != repo {
				t.Errorf("%s: the plugin was asked for %q, want %q (the image's repository)", what, img, repo)
			}
		}
	}

	start := time.Now()
	createPod(t, privatePod("plugin-first", reg.PluginBusybox))
	waitPod(t, time.Minute, "default/plugin-first", "running", running)
	ranAtLatest := time.Now()
	pulledBy(t, "plugin-first", reg.PluginBusybox)
	wantRuns("the first pull", 1)

	// Pulled again (PullAlways) within the cache duration: the cached answer.
	createPod(t, privatePod("plugin-cached", reg.PluginBusybox))
	waitPod(t, time.Minute, "default/plugin-cached", "running", running)
	pulledBy(t, "plugin-cached", reg.PluginBusybox)
	if took := time.Since(start); took >= pluginCacheDuration {
		t.Fatalf("the second pull came %s after the first pod was created, not within the cache duration %s: the machine is too slow for this test", took.Round(time.Millisecond), pluginCacheDuration)
	}
	wantRuns("a second pull within the cache duration", 1)

	// The same registry outside matchImages, with a pull secret; and the local busybox.
	forgetImage(t, reg.Busybox)
	dockerConfigJSON(t, "registry-not-plugin", reg.Host, reg.User, reg.Password)
	createPod(t, privatePod("plugin-nomatch", reg.Busybox, "registry-not-plugin"))
	createPod(t, busyboxPod("plugin-public", "while true; do sleep 1; done"))
	waitPod(t, time.Minute, "default/plugin-nomatch", "running", running)
	waitPod(t, time.Minute, "default/plugin-public", "running", running)
	pulledBy(t, "plugin-nomatch", reg.Busybox)
	wantRuns("pulls of images outside matchImages", 1)

	// Once the cached answer expired, the next pull runs the plugin again.
	time.Sleep(time.Until(ranAtLatest.Add(pluginCacheDuration + time.Second)))
	createPod(t, privatePod("plugin-expired", reg.PluginBusybox))
	waitPod(t, time.Minute, "default/plugin-expired", "running", running)
	pulledBy(t, "plugin-expired", reg.PluginBusybox)
	wantRuns("a pull after the cache duration", 2)
}
