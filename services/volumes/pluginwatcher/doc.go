// Package pluginwatcher registers node plugins (CSI drivers, DRA drivers) the way the
// kubelet's plugin manager does, so that a driver's node-driver-registrar works unchanged
// against unitlet-volumes.
//
// A plugin announces itself by creating a Unix socket in the plugin registration directory
// (the kubelet's <root-dir>/plugins_registry) or one of its subdirectories. The Watcher
// finds sockets already there when it starts and new ones through inotify, asks each for
// its PluginInfo over the pluginregistration/v1 Registration service, hands the plugin to
// the Handler for its type (ValidatePlugin, then RegisterPlugin) and tells the plugin the
// outcome with NotifyRegistrationStatus. When the socket goes away, the plugin is
// deregistered (DeRegisterPlugin).
//
// What matches the kubelet (pkg/kubelet/pluginmanager at v1.36.3):
//   - the directory is created 0750 if missing, and names starting with "." are ignored;
//   - the connection to a socket may take 10 s, GetInfo 1 s and NotifyRegistrationStatus
//     5 s (operationexecutor/operation_generator.go);
//   - a failed registration, including a refused one, is tried again after 500 ms, then
//     after twice the previous wait, up to 2 min 2 s (util/goroutinemap/exponentialbackoff),
//     for as long as the socket file is there;
//   - an empty endpoint in PluginInfo means the registration socket itself;
//   - RegisterPlugin is given a nil client timeout, so a handler uses its own default;
//   - a socket re-created at the same path deregisters the plugin of the old one before the
//     new one is validated, as the kubelet's reconciler does when a path's UUID changes, so
//     a restarted CSI driver of the same version is not refused as a duplicate;
//   - the handler calls for one plugin name never overlap: Validate, Register and
//     DeRegister of a name happen one after the other;
//   - stopping deregisters nothing: a restart must not tear down running drivers, and the
//     next start finds their sockets again.
//
// Where it differs, on purpose:
//   - A socket is refused, with a log line saying why, unless it is a Unix socket itself
//     (not a symbolic link to one), lies inside the watched directory once symbolic links
//     in its parent directories are resolved, and is owned by root. The kubelet follows
//     symbolic links and dials any socket it finds.
//   - Each socket has its own goroutine and its own backoff, and a new socket file starts
//     with a fresh backoff. The kubelet's backoff belongs to the path and outlives the file,
//     so a restarted driver could wait out the failures of its predecessor.
//   - A plugin of the same type and name from another socket replaces the registered one:
//     once the new one passes ValidatePlugin, the old one is deregistered, and removing the
//     old socket later does nothing more. The kubelet registers the new one over the old
//     and, when the old socket is removed, deregisters the name the new one holds.
//   - A socket found twice at start (by the initial walk and by an event) is registered
//     once; the kubelet may deregister and register it again. A socket renamed away counts
//     as removed; the kubelet only sees deletions.
//   - A socket refusing connections fails its attempt at once unless it was created less
//     than a second ago (the plugin has bound it and is about to listen), when it is
//     dialled again until then. The kubelet's blocking dial waits up to 10 s for any socket.
//   - Registration follows events at once instead of a reconcile loop every second.
package pluginwatcher
