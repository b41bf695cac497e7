"""EMsoft EBSD master patterns (the HDF5 output of EMsoft's EMEBSDmaster program).

Layout, as found in the files (EMsoft 4 to 6, and the files kikuchipy ships)::

    /EMheader/EBSDmaster/ProgramName        b"EMEBSDmaster.f90" (or ...OpenCL.f90)
    /EMData/EBSDmaster/mLPNH, mLPSH         north / south square Lambert projections,
                                            (numset, n_energies, n, n); older or
                                            single-energy files drop axes: (numset, n, n),
                                            (n_energies, n, n) or (n, n)
    /EMData/EBSDmaster/EkeVs                (n_energies,) energy bins, keV
    /EMData/EBSDmaster/numEbins, numset     counts of the above
    /EMData/EBSDmaster/xtalname             the crystal file the simulation used
    /EMData/MCOpenCL/accum_e                Monte-Carlo histogram (n, n, n_energies) of the
                                            backscattered electrons' exit energies
    /CrystalData/LatticeParameters          a, b, c (nm), alpha, beta, gamma (degrees)
    /CrystalData/SpaceGroupNumber           1..230
    /NMLparameters/MCCLNameList/EkeV        beam voltage (keV), Ebinsize (keV)

Arrays are used as stored: row index = Lambert ``Y``, column index = Lambert ``X``, as
:mod:`ebsdxc.simulate` projects them and kikuchipy reads them; the ``numset`` sites (atom
positions of the asymmetric unit) are summed, as kikuchipy does.

The material check needs only a crystal structure and a lattice parameter: :mod:`ebsdxc.io`
sits below :mod:`ebsdxc.materials` and does not import it, so ``material=`` takes any object
with ``structure`` and ``a`` (metres) attributes, such as an :class:`ebsdxc.materials.Material`,
or a ``(structure, a)`` pair; the caller resolves preset names.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import h5py
import numpy as np

from ..errors import InputError
from .edax_h5 import entry, number, text
from .hdf5 import check_filters, is_hdf5_file, read_entry
from .orientation_map import laue_group_name
from .source import READ_ERRORS, damaged

__all__ = ["MasterPattern", "SPACE_GROUPS_OF_STRUCTURE", "is_master_pattern", "read_master_pattern"]

_GROUP = "EMData/EBSDmaster"

#: Space group numbers a :class:`ebsdxc.materials.Material` structure may have.
SPACE_GROUPS_OF_STRUCTURE = {"fcc": (225,), "bcc": (229,), "diamond": (227,), "hcp": (194,)}

# relative tolerance on lattice parameters when checking a material against the file: EMsoft
# crystal files come from different sources and temperatures (Ni 0.35236 nm against 0.35238)
_LATTICE_TOLERANCE = 0.02


@dataclass(frozen=True, eq=False)
class MasterPattern:
    """An EBSD master pattern for one energy (or an energy-weighted mean), ready to project.

    Attributes
    ----------
    lambert : numpy.ndarray
        float32 ``(2, n, n)`` [north, south] square Lambert projections (read-only), as
        :func:`ebsdxc.simulate.simulate_pattern` takes them.
    energies : numpy.ndarray
        float64 keV of every energy bin in the file (read-only; empty when it states none).
    energy_used : str
        Which bins ``lambert`` is made of, in words (e.g. ``"20 keV (highest of 1 bins)"``).
    voltage_kv : float or None
        Beam voltage of the Monte-Carlo simulation.
    xtalname : str or None
        The crystal file EMsoft used.
    lattice : tuple of float or None
        ``(a, b, c)`` in nm and ``(alpha, beta, gamma)`` in degrees.
    space_group : int or None
    laue : str or None
        Laue group name (one of :data:`ebsdxc.crystal.LAUE_GROUPS`) of ``space_group``.
    path : str
    checked_material : str or None
        Name of the material checked against the file's structure and lattice, or None when
        none was given or the file states no structure.
    """

    lambert: np.ndarray
    energies: np.ndarray
    energy_used: str
    voltage_kv: float | None
    xtalname: str | None
    lattice: tuple | None
    space_group: int | None
    laue: str | None
    path: str
    checked_material: str | None = None

    @property
    def size(self) -> int:
        """Side ``n`` of the Lambert squares."""
        return int(self.lambert.shape[-1])

    def to_dict(self) -> dict:
        """JSON-able provenance (no arrays): file, energies, crystal."""
        return {"path": self.path, "format": "emsoft_ebsd_master_pattern", "size": self.size,
                "energies_kev": [float(e) for e in self.energies], "energy_used": self.energy_used,
                "voltage_kv": self.voltage_kv, "xtalname": self.xtalname,
                "lattice": None if self.lattice is None else [float(v) for v in self.lattice],
                "space_group": self.space_group, "laue": self.laue,
                "checked_material": self.checked_material}


def is_master_pattern(f) -> bool:
    """Whether open HDF5 file ``f`` holds an EMsoft EBSD master pattern."""
    return isinstance(f.get(_GROUP), h5py.Group)


def read_master_pattern(path, *, energy=None, material=None) -> MasterPattern:
    """Read an EMsoft EBSD master-pattern file.

    Parameters
    ----------
    path : str or os.PathLike
    energy : float or (float, float), optional
        ``None``: the highest energy bin (as kikuchipy uses by default). A number (keV): the
        nearest bin, within half a bin of the file's range. A ``(lo, hi)`` range: the mean of
        the bins in it, weighted by the Monte-Carlo histogram of exit energies when the file
        holds one that fits (``EMData/MCOpenCL/accum_e``), else a plain mean.
    material : optional
        An object with attributes ``structure`` (``"fcc"``, ``"bcc"``, ``"diamond"``,
        ``"hcp"`` or None) and ``a`` (metres, or None), and optionally ``c`` and ``name``
        (an :class:`ebsdxc.materials.Material`), or a pair ``(structure, a)``. When given,
        the file's space group must be the structure's and its lattice parameter ``a`` (and
        ``c``) within 2%.

    Returns
    -------
    MasterPattern

    Raises
    ------
    InputError
        One line naming the file: not HDF5, not an EMsoft master pattern, a missing or
        malformed hemisphere, an energy outside the file's range, a material that does not fit.
    ValueError
        For a malformed ``energy`` or ``material`` argument.
    """
    path = os.fspath(path)
    want = _check_energy_argument(energy)
    mat = _material_argument(material)
    if not os.path.isfile(path):
        raise InputError("no such file (an EMsoft master-pattern HDF5 file was expected)", path)
    if not is_hdf5_file(path):
        raise InputError("not an HDF5 file, so not an EMsoft EBSD master pattern", path)
    try:
        with h5py.File(path, "r") as f:
            return _read(f, path, want, mat)
    except InputError:
        raise
    except (*READ_ERRORS, ValueError, TypeError) as exc:
        raise damaged(path, exc) from exc


# --------------------------------------------------------------------------- arguments


def _check_energy_argument(energy):
    if energy is None:
        return None
    if isinstance(energy, (int, float, np.integer, np.floating)) and not isinstance(energy, bool):
        value = float(energy)
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"energy must be a positive number of keV, got {energy!r}")
        return value
    try:
        lo, hi = (float(v) for v in energy)
    except (TypeError, ValueError):
        raise ValueError(f"energy must be None, a number of keV or a (lo, hi) range, got {energy!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise ValueError(f"energy range must be two positive keV values with lo <= hi, got {energy!r}")
    return (lo, hi)


def _material_argument(material):
    if material is None:
        return None
    if isinstance(material, (str, os.PathLike)):
        raise ValueError("material: give an ebsdxc.materials.Material (ebsdxc.materials.material(name)) or a "
                         f"(structure, a in metres) pair, not the name {material!r}")
    if isinstance(material, (tuple, list)):
        if len(material) != 2:
            raise ValueError(f"material must be a (structure, a in metres) pair, got {material!r}")
        structure, a = material
        c, name = None, f"{structure} a={a}"
    else:
        structure, a = getattr(material, "structure", None), getattr(material, "a", None)
        c, name = getattr(material, "c", None), getattr(material, "name", "material")
    if structure is not None and structure not in SPACE_GROUPS_OF_STRUCTURE:
        raise ValueError(f"material structure must be one of {', '.join(SPACE_GROUPS_OF_STRUCTURE)} or None, "
                         f"got {structure!r}")
    for label, value in (("a", a), ("c", c)):
        if value is not None and not (isinstance(value, (int, float, np.number))
                                      and 0 < float(value) < 1e-8):
            raise ValueError(f"material {label} must be a lattice length in metres (e.g. 3.52e-10), got {value!r}")
    return {"name": str(name), "structure": structure, "a": a, "c": c}


# --------------------------------------------------------------------------- reading


def _read(f, path, want, mat) -> MasterPattern:
    group = f.get(_GROUP)
    if not isinstance(group, h5py.Group):
        raise InputError(f"not an EMsoft EBSD master-pattern file (it has no group {_GROUP}; EMsoft's "
                         "EMEBSDmaster program writes one)", path)
    halves = []
    for name, label in (("mLPNH", "north"), ("mLPSH", "south")):
        ds = group.get(name)
        if not isinstance(ds, h5py.Dataset):
            raise InputError(f"the {label} hemisphere {_GROUP}/{name} is missing (a master pattern needs both "
                             "square Lambert hemispheres, mLPNH and mLPSH)", path)
        if ds.dtype.kind not in "iuf" or ds.ndim not in (2, 3, 4):
            raise InputError(f"{_GROUP}/{name} is {ds.ndim}-D {ds.dtype}, not a numeric (numset, [energies,] n, n) "
                             "square Lambert projection", path)
        if ds.shape[-1] != ds.shape[-2] or ds.shape[-1] < 2:
            raise InputError(f"{_GROUP}/{name} {tuple(ds.shape)} is not square: a square Lambert projection is "
                             "n x n", path)
        check_filters(ds, path)
        halves.append(ds)
    if halves[0].shape != halves[1].shape:
        raise InputError(f"the hemispheres differ in shape: mLPNH {tuple(halves[0].shape)}, mLPSH "
                         f"{tuple(halves[1].shape)}", path)

    energies = _energies(group, path)
    layout = _layout(halves[0].shape, energies, path)
    n_energy = layout["n_energy"]
    if energies.size == 0 and n_energy == 1:
        volts = _nml_number(f, "EkeV")
        energies = np.array([] if volts is None else [volts], dtype=np.float64)
    index, weights, used = _choose_energy(f, energies, n_energy, want, path)
    lambert = np.stack([_combine(ds, layout, index, weights) for ds in halves]).astype(np.float32)
    if not np.all(np.isfinite(lambert)):
        raise InputError("the master pattern holds NaN or infinite intensities", path)
    lambert.setflags(write=False)
    energies.setflags(write=False)

    lattice, space_group, laue = _crystal(f, path)
    xtalname = text(group, "xtalname") or _nml_text(f, "xtalname")
    checked = _check_material(mat, lattice, space_group, path)
    return MasterPattern(lambert=lambert, energies=energies, energy_used=used, voltage_kv=_nml_number(f, "EkeV"),
                         xtalname=xtalname, lattice=lattice, space_group=space_group, laue=laue, path=path,
                         checked_material=checked)


def _energies(group, path) -> np.ndarray:
    ds = group.get("EkeVs")
    if not isinstance(ds, h5py.Dataset):
        return np.zeros(0, dtype=np.float64)
    values = np.atleast_1d(np.asarray(read_entry(ds), dtype=np.float64)).ravel()
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise InputError(f"{_GROUP}/EkeVs holds energies that are not positive numbers: {values.tolist()[:8]}", path)
    return values


def _layout(shape, energies, path) -> dict:
    """Which axes of a stored hemisphere are sites and energies."""
    n_e = energies.size
    if len(shape) == 4:
        if n_e and shape[1] != n_e:
            raise InputError(f"mLPNH {tuple(shape)} has {shape[1]} energy bins but EkeVs lists {n_e}", path)
        return {"site_axis": 0, "energy_axis": 1, "n_energy": shape[1]}
    if len(shape) == 3:
        if n_e > 1 and shape[0] == n_e:
            return {"site_axis": None, "energy_axis": 0, "n_energy": n_e}
        if n_e > 1:
            raise InputError(f"mLPNH {tuple(shape)} has no axis for the {n_e} energy bins EkeVs lists", path)
        return {"site_axis": 0, "energy_axis": None, "n_energy": 1}
    if n_e > 1:
        raise InputError(f"mLPNH {tuple(shape)} is one image but EkeVs lists {n_e} energy bins", path)
    return {"site_axis": None, "energy_axis": None, "n_energy": 1}


def _bin_width(f, energies) -> float:
    width = _nml_number(f, "Ebinsize")
    if width is None and energies.size > 1:
        width = float(np.median(np.abs(np.diff(energies))))
    return width if width and width > 0 else 1.0


def _choose_energy(f, energies, n_energy, want, path):
    """Indices of the bins to use, their weights, and a description."""
    if want is None:
        i = int(np.argmax(energies)) if energies.size else n_energy - 1
        where = f"{energies[i]:g} keV" if energies.size else "the only energy bin"
        return [i], None, f"{where} (highest of {n_energy} bins)" if n_energy > 1 else where
    if energies.size == 0:
        raise InputError(f"states no energies (no {_GROUP}/EkeVs), so energy={want!r} cannot be chosen; leave "
                         "energy unset", path)
    lo_file, hi_file = float(energies.min()), float(energies.max())
    tol = 0.5 * _bin_width(f, energies)
    covers = f"covers {lo_file:.1f}-{hi_file:.1f} keV"
    if isinstance(want, float):
        if not lo_file - tol <= want <= hi_file + tol:
            raise InputError(f"the master pattern {covers}, asked {want:g} keV", path)
        i = int(np.argmin(np.abs(energies - want)))
        return [i], None, f"{energies[i]:g} keV (nearest bin to {want:g} keV)"
    lo, hi = want
    if hi < lo_file - tol or lo > hi_file + tol:
        raise InputError(f"the master pattern {covers}, asked {lo:g}-{hi:g} keV", path)
    index = [int(i) for i in np.flatnonzero((energies >= lo - 1e-6) & (energies <= hi + 1e-6))]
    if not index:
        raise InputError(f"no energy bin of the master pattern lies in {lo:g}-{hi:g} keV (bins: "
                         f"{', '.join(f'{e:g}' for e in energies)})", path)
    hist = _energy_histogram(f, energies.size)
    span = f"{energies[index[0]]:g}-{energies[index[-1]]:g} keV ({len(index)} bins"
    if hist is not None and hist[index].sum() > 0:
        return index, hist[index] / hist[index].sum(), span + ", weighted by the Monte-Carlo energy histogram)"
    return index, None, span + ", plain mean)"


def _energy_histogram(f, n_energy) -> np.ndarray | None:
    """Electrons per energy bin from the Monte-Carlo ``accum_e``, if it fits ``n_energy`` bins."""
    ds = f.get("EMData/MCOpenCL/accum_e")
    if not isinstance(ds, h5py.Dataset) or ds.dtype.kind not in "iuf" or ds.ndim != 3:
        return None
    # EMsoft writes accum_e(numEbins, -nx:nx, -nx:nx) from Fortran: energy is the last h5py axis
    if ds.shape[-1] != n_energy:
        return None
    hist = np.asarray(ds[()], dtype=np.float64).sum(axis=(0, 1))
    return hist if np.all(np.isfinite(hist)) and np.all(hist >= 0) else None


def _combine(ds, layout, index, weights) -> np.ndarray:
    """The stored hemisphere summed over sites, for the chosen energy bins (weighted mean)."""
    axis_e = layout["energy_axis"]
    if axis_e is None:
        data = np.asarray(ds[()], dtype=np.float64)[..., None, :, :]  # a 1-bin energy axis before (n, n)
    else:
        lo, hi = min(index), max(index) + 1  # one contiguous hyperslab, then pick
        sl = [slice(None)] * ds.ndim
        sl[axis_e] = slice(lo, hi)
        data = np.asarray(ds[tuple(sl)], dtype=np.float64)
        data = np.take(data, [i - lo for i in index], axis=axis_e)
        if axis_e == 0:
            data = data[None]
    # to (n_chosen, n, n)
    data = data.sum(axis=0) if layout["site_axis"] is not None else data.reshape(data.shape[-3:])
    if weights is None:
        return data.mean(axis=0)
    return np.tensordot(np.asarray(weights, dtype=np.float64), data, axes=(0, 0))


def _nml_number(f, name) -> float | None:
    group = f.get("NMLparameters/MCCLNameList")
    return number(group, name) if isinstance(group, h5py.Group) else None


def _nml_text(f, name) -> str | None:
    group = f.get("NMLparameters/MCCLNameList")
    return text(group, name) if isinstance(group, h5py.Group) else None


def _crystal(f, path):
    group = f.get("CrystalData")
    if not isinstance(group, h5py.Group):
        return None, None, None
    lattice = entry(group, "LatticeParameters")
    if lattice is not None:
        lattice = np.atleast_1d(np.asarray(lattice, dtype=np.float64)).ravel()
        if lattice.shape != (6,) or not np.all(np.isfinite(lattice)) or np.any(lattice <= 0):
            raise InputError("CrystalData/LatticeParameters must be six positive numbers (a, b, c in nm, "
                             f"alpha, beta, gamma in degrees), got {lattice.tolist()}", path)
        lattice = tuple(float(v) for v in lattice)
    sg = number(group, "SpaceGroupNumber")
    laue = None
    if sg is not None:
        if not (float(sg).is_integer() and 1 <= sg <= 230):
            raise InputError(f"CrystalData/SpaceGroupNumber {sg:g} is not a space group (1 to 230)", path)
        sg = int(sg)
        laue = laue_group_name(space_group=sg)
    return lattice, sg, laue


def _check_material(mat, lattice, space_group, path) -> str | None:
    if mat is None or (mat["structure"] is None and mat["a"] is None):
        return None
    name = mat["name"]
    checked = False
    if mat["structure"] is not None and space_group is not None:
        allowed = SPACE_GROUPS_OF_STRUCTURE[mat["structure"]]
        if space_group not in allowed:
            raise InputError(f"the master pattern is of space group {space_group}, but material {name} is "
                             f"{mat['structure']} (space group {', '.join(map(str, allowed))}): the wrong "
                             "master pattern or the wrong material", path)
        checked = True
    if lattice is not None:
        for label, value, stored in (("a", mat["a"], lattice[0]), ("c", mat["c"], lattice[2])):
            if value is None:
                continue
            stored_m = stored * 1e-9
            if abs(float(value) - stored_m) > _LATTICE_TOLERANCE * stored_m:
                raise InputError(f"the master pattern's lattice parameter {label} = {stored:g} nm differs from "
                                 f"material {name}'s {float(value) * 1e9:g} nm by more than "
                                 f"{_LATTICE_TOLERANCE:.0%}: the wrong master pattern or the wrong material", path)
            checked = True
    return name if checked else None
