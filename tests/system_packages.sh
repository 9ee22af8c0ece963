#!/usr/bin/env bash
# Usage: system_packages.sh COMMAND:DEBIAN_PACKAGE ...
# Installs the Debian packages whose commands are missing (apt-get, as root), or says in one
# sentence what to install. Never downloads a browser or binary of its own.
set -u
missing=(); pkgs=()
for pair in "$@"; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || { missing+=("$cmd"); pkgs+=("$pkg"); }
done
[ ${#pkgs[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Debian packages for ${missing[*]}: ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # another apt-get (a second make beside this one) holds the lock: wait for it, do not fail
  lock=(-o DPkg::Lock::Timeout=600)
  apt-get "${lock[@]}" update -qq && \
    apt-get "${lock[@]}" install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null \
    || { echo "apt-get could not install ${pkgs[*]}." >&2; exit 1; }
  exit 0
fi
echo "Missing ${missing[*]}: install the system packages ${pkgs[*]} (Debian/Ubuntu: sudo apt-get install ${pkgs[*]})." >&2
exit 1
