package spec

// Hidden stands for a secret's value (an env value, a password) wherever
// berth shows settings: in a Change, that it changed is shown, never what
// it was or became; the API shows it for every env value. "[hidden]" is
// what Kafka Connect shows for a PASSWORD-type config.
const Hidden = "[hidden]"
