package fs

import gofs "github.com/hanwen/go-fuse/v2/fs"

// What Node implements; everything else gets go-fuse's default (ENOTSUP
// for node operations, so nothing silently succeeds).
var (
	_ gofs.NodeLookuper      = (*Node)(nil)
	_ gofs.NodeGetattrer     = (*Node)(nil)
	_ gofs.NodeSetattrer     = (*Node)(nil)
	_ gofs.NodeOpener        = (*Node)(nil)
	_ gofs.NodeCreater       = (*Node)(nil)
	_ gofs.NodeMkdirer       = (*Node)(nil)
	_ gofs.NodeMknoder       = (*Node)(nil)
	_ gofs.NodeSymlinker     = (*Node)(nil)
	_ gofs.NodeLinker        = (*Node)(nil)
	_ gofs.NodeReadlinker    = (*Node)(nil)
	_ gofs.NodeUnlinker      = (*Node)(nil)
	_ gofs.NodeRmdirer       = (*Node)(nil)
	_ gofs.NodeRenamer       = (*Node)(nil)
	_ gofs.NodeReaddirer     = (*Node)(nil)
	_ gofs.NodeStatfser      = (*Node)(nil)
	_ gofs.NodeGetxattrer    = (*Node)(nil)
	_ gofs.NodeSetxattrer    = (*Node)(nil)
	_ gofs.NodeRemovexattrer = (*Node)(nil)
	_ gofs.NodeListxattrer   = (*Node)(nil)
	_ gofs.NodeOnForgetter   = (*Node)(nil)
)
