# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one controller-side Kubernetes layer, split as kubernetes.core's module_utils/k8s is.

* ``client`` - connection resolution exactly as ``kubernetes.core`` resolves it (options, then
  their ``K8S_AUTH_*`` environment variables, then in-cluster or the kubeconfig), and a
  ``Client`` that makes JSON requests through the official client's configuration and REST layer
  (no generated typed API classes: importing CoreV1Api alone costs about 0.5 s per forked worker).
  Secrets (bearer tokens, passwords, kubeconfig user credentials) never reach a message.
* ``service`` - object helpers: get (None when absent), list, and a read-compute-patch loop that
  sends an RFC 6902 JSON patch guarded by a ``test`` of the resourceVersion it was computed from.
* ``waiter`` - the deadline loop every wait shares, with an injectable clock.
* ``labels`` - the one label selector parser (``key=value`` or ``key``), behind the skip label
  of every role (filter ``kubegpu.fleet.has_label``), the rollout and the device plugin plan.

Every action plugin that talks to the API (``kubegpu.fleet.node_maintenance``, and any later one)
takes ``AUTH_ARG_SPEC``, calls ``client.connect`` and closes the client in ``finally`` (``close()``
removes the kubeconfig's inline CA, client certificate and key the loader wrote to disk: a forked
Ansible worker never runs the loader's atexit cleanup); the action group ``kubegpu.fleet.k8s`` in
meta/runtime.yml lists them so one ``module_defaults`` block configures them and kubernetes.core.
"""
