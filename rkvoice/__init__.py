"""rkvoice: an offline Chinese voice assistant for the Rockchip RK3576."""

__version__ = "0.1.0"
