package sched

// Unload is the rule for layers a range change released: new sessions
// are admitted only to the range kept, while a released layer stays
// loaded for the sessions that opened on it before the change, and is
// let go once the last of them has ended (users counts those still
// open). Unloading it earlier would break sessions mid-generation;
// keeping it longer holds memory no new session may use.
func Unload(released bool, users int) bool { return released && users <= 0 }
