// Package systemdunit computes how systemd would start a service from its unit file and
// drop-ins, for a test bed where systemd is not PID 1: the environment (Environment=,
// EnvironmentFile=) and the command lines (ExecStartPre=, ExecStart=) with their variables
// replaced. It implements only the semantics the kubelet's kubeadm drop-ins rely on, as
// systemd.exec(5), systemd.service(5) and systemd.unit(5) describe them (systemd 252), and
// refuses what it does not implement instead of guessing:
//
//   - A unit file comes from the first unit directory holding it; drop-ins NAME.d/*.conf from
//     every unit directory are applied after it in the order of their file names, a file in
//     an earlier directory hiding one of the same name in a later one.
//   - Environment= and EnvironmentFile= accumulate; an empty assignment resets the list.
//     Variables from files override Environment= whatever the order of the lines, and a later
//     file overrides an earlier one. A file named with a leading "-" may be missing.
//   - ExecStart= and ExecStartPre= accumulate; an empty assignment resets the list. A leading
//     "-" on the command ignores its failure.
//   - In a command line, a word that is exactly $NAME becomes the variable's value split at
//     whitespace (quotes respected, zero words if unset); ${NAME} anywhere becomes the value
//     as it is, within the word; $$ is a literal $. %% is a literal %; other specifiers are
//     refused.
//
// Sandboxing settings (ProtectSystem= and its kin) are not emulated: the systemd node of the
// test bed (test/node StartSystemd, test/sysnode) runs the shipped units under a real systemd.
package systemdunit
