"""One limiter, many keys: ``limiter.for_key(key)`` (:class:`Keyable`).

A *view* is the limiter built again from the same arguments, on the same backend, its
budget kept under the limiter's name and the key (``keys.Keyed``). The state lives in
the store, so a view is only a cache: :class:`KeyViews` may drop one at any time, and
the next ``for_key`` finds the same budget. An unnamed limiter on a ``MemoryBackend``
it was given keeps its keys in a private one, since another unnamed limiter may share
that backend. ``MemoryBackend.sweep`` has the cache forget the views of idle keys, so
their state can go too.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from .. import _validate
from .._stores.keys import Keyed
from .._stores.memory import MemoryBackend

__all__ = ["DEFAULT_KEY_VIEWS", "KeyViews", "Keyable"]

#: How many views of its keys a limiter keeps by default (``key_views``).
DEFAULT_KEY_VIEWS = 1024

V = TypeVar("V", bound="Keyable")

#: Guards the first making of a limiter's cache of views.
_making = threading.Lock()


class KeyViews:
    """A limiter's views of its keys, at most ``size``, the most recently used kept.

    Looked up under one lock, so callers asking for one key at once get one view; built
    outside it, since a bind may sweep the backend, which calls :meth:`forget_idle`.
    """

    __slots__ = ("__weakref__", "_lock", "_views", "backend", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._views: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        #: Where an unnamed limiter keeps its keys when it shares a backend it was
        #: given (made at the first).
        self.backend: MemoryBackend | None = None

    def get(self, key: str, make: Callable[[str], V]) -> V:
        with self._lock:
            view = self._views.get(key)
            if view is not None:
                self._views.move_to_end(key)
                return view  # type: ignore[no-any-return]
        made = make(key)
        dropped: list[tuple[str, Any]] = []
        with self._lock:
            view = self._views.get(key)
            if view is not None:
                # Another thread made one meanwhile (the same budget): return the one kept.
                self._views.move_to_end(key)
                return view  # type: ignore[no-any-return]
            if self.size > 0:
                self._views[key] = made
                while len(self._views) > self.size:
                    # Dropping a view drops nothing of its budget: that lives in the store.
                    dropped.append(self._views.popitem(last=False))
        # Let go outside the lock: a view collected here may start a sweep, which takes it.
        del dropped
        return made

    def resize(self, size: int) -> None:
        dropped: list[tuple[str, Any]] = []
        with self._lock:
            self.size = size
            while len(self._views) > size:
                dropped.append(self._views.popitem(last=False))
        del dropped

    def forget_idle(self) -> int:
        """Drop the views whose keys are idle (budget as good as new, nothing held or
        queued); return how many. A sweep calls it before it looks for idle state. A
        cache busy on another thread is left for the next sweep."""
        if not self._lock.acquire(blocking=False):
            return 0
        try:
            idle = [key for key, view in self._views.items() if view._idle()]
            dropped = [self._views.pop(key) for key in idle]
            if len(dropped) > len(self._views):
                # An OrderedDict keeps its table at its largest size: copy it to let that go.
                self._views = OrderedDict(self._views)
        finally:
            self._lock.release()
        # Collected as this returns, so the same sweep finds their state unused.
        return len(dropped)

    def __len__(self) -> int:
        return len(self._views)


def _remembering(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def remembered(self: Keyable, *args: Any, **kwargs: Any) -> None:
        # The outermost constructor's arguments: those a view is built from again.
        if not hasattr(self, "_made"):
            self._made = (args, kwargs)
        init(self, *args, **kwargs)

    return remembered


class Keyable:
    """What lets a limiter hand out views of itself, one per key (``for_key``)."""

    __slots__ = ("_key", "_keys", "_made")

    _key: str | None
    _keys: KeyViews | None
    _made: tuple[tuple[Any, ...], dict[str, Any]]
    #: What to call instead, for a limiter that is itself a view of another's budget
    #: (``limiter.low``); ``None``: it hands out views.
    _views_from: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            cls.__init__ = _remembering(init)  # type: ignore[method-assign]

    def _place_of(self, name: str | None) -> str | Keyed | None:
        """What this limiter's state is kept under: its name, or a view's name and key."""
        try:
            key = self._key
        except AttributeError:
            key = self._key = None
            self._keys = None
        return name if key is None else Keyed(name, key)

    @property
    def key(self) -> str | None:
        """The key whose budget this view keeps (``None``: not a view; see :meth:`for_key`)."""
        return self._key

    @property
    def key_views(self) -> int:
        """How many views of its keys this limiter keeps (default 1,024): the most
        recently used. Set it to bound the memory views take; 0 keeps none (each
        ``for_key`` builds a view). Dropping a view never drops its budget."""
        return DEFAULT_KEY_VIEWS if self._keys is None else self._keys.size

    @key_views.setter
    def key_views(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"key_views must be an int, got {type(size).__name__} {_validate.shown(size)}")
        if size < 0:
            raise ValueError(f"key_views must be >= 0, got {size!r}")
        self._views().resize(size)

    def _views(self) -> KeyViews:
        views = self._keys
        if views is None:
            with _making:
                views = self._keys
                if views is None:
                    views = self._keys = KeyViews(DEFAULT_KEY_VIEWS)
        return views

    def for_key(self: V, key: str) -> V:
        """This limiter for one ``key`` (a customer, a token, a shop): the same kind,
        parameters, backend, clock and options, with a budget of its own.

        The budget is kept under the limiter's name and the key, apart from every
        other key's; on Redis each key has its own hash tag, so keys spread over a
        Cluster's masters. ``view.name`` is the limiter's name, ``view.key`` the key;
        events and metrics are labelled by the name (no series per key) and reach the
        limiter's subscribers. Views are cheap (no round trip) and kept in a bounded
        cache (:attr:`key_views`); the budget outlives its view, and idle keys are
        forgotten as any idle state is.

        Raises:
            TypeError: ``key`` is not a str, or this limiter is a view already.
            ValueError: ``key`` is empty, longer than a name may be (200
                characters), or text UTF-8 cannot encode.
        """
        checked = _validate.key(key)
        if self._views_from is not None:
            raise TypeError(f"{self!r} has no keys of its own: call {self._views_from}")
        if self._key is not None:
            raise TypeError(
                f"{self!r} keeps the budget of key {_validate.shown(self._key)} already: call for_key on the "
                f"limiter it came from"
            )
        return self._views().get(checked, self._view)

    def _view(self: V, key: str) -> V:
        cls = type(self)
        view = cls.__new__(cls)
        view._key = key
        view._keys = None
        args, kwargs = self._made
        if kwargs.get("backend") is None or self._unnamed_in_process():
            kwargs = {**kwargs, "backend": self._keys_store()}
        view._made = (args, kwargs)
        cls.__init__(view, *args, **kwargs)
        view._adopt(self)
        view.backend.keep_views(self._views())
        return view

    def _keys_store(self) -> Any:
        """Where a view of this limiter keeps its budget: the backend given (the
        private store made for the limiter if none was given); for an unnamed limiter
        given a backend, one of its own (no name to keep keys under in a store others
        may share), made now if need be."""
        if self._made[1].get("backend") is None or not self._unnamed_in_process():
            return self.backend
        views = self._views()
        with _making:
            if views.backend is None:
                views.backend = MemoryBackend()
        return views.backend

    @property
    def backend(self) -> Any:
        """Where this limiter's state is kept."""
        raise NotImplementedError

    def _idle(self) -> bool:
        """Whether this view's in-process budget is as good as new, nothing held or queued;
        ``False`` in a store beyond this process, which forgets idle state itself."""
        return False

    def _unnamed_in_process(self) -> bool:
        """Whether this limiter has no name (and so no shared store)."""
        raise NotImplementedError

    def _adopt(self, parent: Any) -> None:
        """Take on what a view shares with the limiter it came from (its subscribers)."""

    def _key_suffix(self) -> str:
        """What a view's repr adds: the call that made it."""
        return "" if self._key is None else f".for_key({_validate.shown(self._key)})"
