package manager

// StripForCache is the cache transform New installs for every type but
// Session. The tests that drive several controllers through a cache that
// cuts as the manager's does (readerworld_test.go, cache_readers_test.go)
// are external (package manager_test): they see the controllers and the
// manager as the binary wires them, through exported names only, and this
// is the one unexported piece they need.
var StripForCache = stripForCache
